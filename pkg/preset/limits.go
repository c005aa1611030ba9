package preset

// Limits of a preset body, checked by Rules.Validate (a body beyond one is invalid: 400 at create
// and update) and listed in README.md (Limits) and openapi.yaml. They bound the work of setting
// a preset's agent up and of assembling its prompt on every model step, and what a turn may
// ask of the server. Sizes are bytes of UTF-8.
const (
	MaxNameBytes    = 200  // name
	MaxModelBytes   = 200  // model.model
	MaxBaseURLBytes = 2048 // model.baseUrl

	MaxCredentialRefBytes = 100 // model.credential (a credential's name or id)

	MaxMaxTokens    = 1_000_000 // model.maxTokens (from 1)
	MaxModelRetries = 10        // model.retries (from 0)

	// MaxToolNames bounds each of tools.allow, tools.deny, tools.toolOrder and approval.ask;
	// MaxToolNameBytes one entry of them.
	MaxToolNames            = 256
	MaxToolNameBytes        = 128
	MaxMaxParallelToolCalls = 64 // tools.maxParallelToolCalls (from 1)
	MaxMaxParallelSubCalls  = 64 // tools.maxParallelSubCalls (from 1)

	// MaxDeclaredTools bounds tools.declared; MaxDeclaredDescriptionBytes the description of
	// one declared tool and MaxDeclaredTimeoutMs its timeoutMs (from 1). Its parameters are
	// bounded by registry.MaxClientParameters.
	MaxDeclaredTools            = 64
	MaxDeclaredDescriptionBytes = 16 << 10
	MaxDeclaredTimeoutMs        = 86_400_000 // one day

	MaxPersonaBytes       = 32 << 10  // prompt.persona
	MaxSections           = 64        // prompt.sections
	MaxSectionNameBytes   = 128       // prompt.sections[].name
	MaxSectionTextBytes   = 32 << 10  // prompt.sections[].text
	MaxSectionOrder       = 1_000_000 // |prompt.sections[].order|
	MaxVariables          = 256       // prompt.variables
	MaxVariableNameBytes  = 64        // a name of prompt.variables
	MaxVariableValueBytes = 8 << 10   // a value of prompt.variables
	// MaxPromptBytes bounds the persona, the section names and texts and the variable names and
	// values together.
	MaxPromptBytes = 128 << 10

	MaxApprovalTimeoutMs = 86_400_000 // approval.timeoutMs (from 1): one day
	MaxMaxSteps          = 1000       // limits.maxSteps (from 1)
)

// Bounds of a ValidationError, so that its message stays small whatever the body: it lists at
// most maxProblems problems (and counts the others), and a message repeats at most maxEcho bytes
// of a value.
const (
	maxProblems = 20
	maxEcho     = 64
)
