package promptasm

// Built-in section names and orders (PRM-1, PRS-3).
const (
	// SectionIdentity is the harness identity line, at OrderIdentity.
	SectionIdentity = "harness:identity"
	// SectionPersona is the deployment persona, at OrderPersona. A scoped section of the same name
	// (for example a preset's persona) shadows it.
	SectionPersona = "deployment:persona"
	// SectionCodeOnly tells the model that run_code is its only directly callable tool. It is
	// present in code and both modes and renders empty in both.
	SectionCodeOnly = "tools:code-only"
	// SectionSDK holds the code runtime's SDK declarations in code and both modes.
	SectionSDK = "tools:sdk"

	OrderIdentity = -100
	OrderPersona  = 0
	OrderCodeOnly = 99
	OrderSDK      = 150
)

// IdentityText is the fixed one-line identity of the harness:identity section.
const IdentityText = "You are an AI agent running on dshd."

// CodeOnlyText is the text of the tools:code-only section in code mode.
const CodeOnlyText = "`run_code` is the only tool you can call directly; a call naming any other tool fails. " +
	"Call every tool the SDK below declares from inside a `run_code` program."

// Built-in variables that Assemble fills from Input (PRM-10). They live in the global layer, so a
// scoped variable of the same name shadows them.
const (
	VarProvider = "provider"
	VarModel    = "model"
	VarCWD      = "cwd"
)

// Config configures a Registry. The zero value is the documented default.
type Config struct {
	// IncludeHarnessIdentity registers the harness:identity section (IdentityText, order -100).
	// Nil means true.
	IncludeHarnessIdentity *bool

	// IncludeRuntimeContext keeps runtime-context entries. False suppresses them for every
	// assembly, as a global suppressor would (PRM-6). Nil means true.
	IncludeRuntimeContext *bool

	// Persona is the text of the deployment:persona section (order 0); it may reference
	// variables. Default empty, which renders no section.
	Persona string

	// ToolOrder orders the wire tools: listed names first at their positions, unlisted tools at
	// the ToolOrderRest marker in name order (PRM-5). It must pass ValidateToolOrder. Nil means
	// plain name order. Input.ToolOrder replaces it for one assembly.
	ToolOrder []string
}

func (c Config) includeIdentity() bool {
	return c.IncludeHarnessIdentity == nil || *c.IncludeHarnessIdentity
}

func (c Config) includeRuntimeContext() bool {
	return c.IncludeRuntimeContext == nil || *c.IncludeRuntimeContext
}
