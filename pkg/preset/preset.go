// Package preset defines agent presets (the README's "Trying it with curl" shows one), their
// defaults and validation; pkg/pgstore stores them, versioned, in PostgreSQL.
//
// A preset is a named, tenant-owned agent configuration. Every update writes a new immutable
// version; a session pins the version it was created with and reads it with PresetVersionGet,
// which also works after the preset was deleted.
package preset

import (
	"time"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/policy"
	"github.com/google/uuid"
)

// Providers, tool presentation modes and approval policies.
const (
	ProviderDeepSeek = "deepseek" // DeepSeek: the OpenAI wire with DeepSeek's defaults; the default provider
	ProviderOpenAI   = "openai"   // any OpenAI-compatible chat-completions endpoint (DeepSeek by default)
	ProviderScripted = "scripted" // the deterministic scripted model (pkg/llm/scripted)

	ModeNative = "native"
	ModeCode   = "code"
	ModeBoth   = "both"

	PolicyAsk   = "ask"
	PolicyNever = "never"

	// UnlistedTools marks where toolOrder puts the tools it does not list (PRM-5).
	UnlistedTools = "<unlisted-tools>"
)

// Defaults filled by Normalize for fields a client leaves out. DefaultModelRetries and
// DefaultMaxSteps are also the agent loop's defaults (agentloop.DefaultModelRetries and
// DefaultMaxSteps), declared here only.
const (
	DefaultProvider             = ProviderDeepSeek
	DefaultModelRetries         = 2 // retries of a failed model call within its step (at most MaxModelRetries)
	DefaultMode                 = ModeNative
	DefaultMaxParallelToolCalls = 10 // SCHED: the pool cap of parallel tool bodies
	DefaultMaxParallelSubCalls  = 10 // PRS-1: the pool cap of run_code sub-calls
	DefaultPolicy               = PolicyAsk
	DefaultApprovalTimeoutMs    = 300_000 // an unanswered approval is cancelled after 5 minutes
	DefaultMaxSteps             = 50      // model calls per turn
)

// Body is what a client writes: everything but Name and Model has a default. After Normalize,
// every pointer field is set and every slice and map is non-nil.
type Body struct {
	Name     string   `json:"name"`
	Model    Model    `json:"model"`
	Tools    Tools    `json:"tools"`
	Prompt   Prompt   `json:"prompt"`
	Approval Approval `json:"approval"`
	Policies Policies `json:"policies"`
	Limits   Limits   `json:"limits"`
}

// Policies are the preset's tool policies: pre-execute rules, guards, post-execute rules and
// policy webhooks, installed on the preset's scope (pkg/policy documents their semantics).
type Policies = policy.Policies

// Model selects the model provider and how it is called. BaseURL is for the deepseek and openai
// providers only; empty means the provider's default endpoint. MaxTokens and ReasoningEffort,
// when set, replace the provider's defaults (request/header marks the ones that were not set
// as adapterDefaults). Retries is how often a failed call that may succeed again (rate limit,
// server error, transport failure, timeout) is retried within its step, 0 to 10. Credential,
// for the deepseek and openai providers, names one of the tenant's stored credentials (its name
// or id; docs/credentials-and-keys.md): its key is sent to the preset's endpoint. It must exist,
// for the same provider, when the preset is written, and is looked up again at every model call.
type Model struct {
	Provider        string `json:"provider"`
	Model           string `json:"model"`
	BaseURL         string `json:"baseUrl,omitempty"`
	MaxTokens       *int   `json:"maxTokens,omitempty"`
	ReasoningEffort string `json:"reasoningEffort,omitempty"`
	Retries         *int   `json:"retries"`
	Credential      string `json:"credential,omitempty"`
}

// Tools selects which tools the agent sees and how. An empty Allow allows every tool; Deny always
// wins. An empty ToolOrder sorts tools by name. Bash holds the settings of the `bash` tool.
// Declared are the tools the preset adds to the built-in ones: client-executed tools
// (DeclaredTool), which Allow, Deny, ToolOrder and approval.ask name like any tool. It is left out
// of the JSON when empty, so a preset that declares none reads as before.
type Tools struct {
	Mode                 string         `json:"mode"`
	Allow                []string       `json:"allow"`
	Deny                 []string       `json:"deny"`
	ToolOrder            []string       `json:"toolOrder"`
	MaxParallelToolCalls *int           `json:"maxParallelToolCalls"`
	MaxParallelSubCalls  *int           `json:"maxParallelSubCalls"`
	Bash                 Bash           `json:"bash"`
	Declared             []DeclaredTool `json:"declared,omitempty"`
}

// Bash are the settings of the `bash` tool. Network gives its sandboxed commands the host's
// network (bubblewrap shares the network namespace instead of giving the sandbox an empty one of
// its own); default false: no network. The operator may forbid it (Rules.SandboxNetworkDisabled,
// DSHD_SANDBOX_NETWORK=0): such a preset is then refused, and one stored before gets no network.
type Bash struct {
	Network *bool `json:"network"`
}

// Prompt configures system prompt assembly (PRM rules).
type Prompt struct {
	Persona   string            `json:"persona"`
	Sections  []Section         `json:"sections"`
	Variables map[string]string `json:"variables"`
}

// Section is a named prompt section (PRM-2). Order is required and must be finite.
type Section struct {
	Name     string   `json:"name"`
	Order    *float64 `json:"order"`
	Text     string   `json:"text"`
	Complete bool     `json:"complete"`
}

// Approval says which tools ask before they run, and what happens to an ask.
type Approval struct {
	Policy    string   `json:"policy"`
	Ask       []string `json:"ask"`
	TimeoutMs *int     `json:"timeoutMs"`
}

// Limits bound a turn.
type Limits struct {
	MaxSteps *int `json:"maxSteps"`
}

// Preset is one version of a preset as stored.
type Preset struct {
	ID        uuid.UUID `json:"id"`
	Version   int       `json:"version"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"` // when this version was written
	Body
}

// Normalize fills the defaults of every field left out. It does not validate.
func (b *Body) Normalize() {
	if b.Model.Provider == "" {
		b.Model.Provider = DefaultProvider
	}
	b.Model.Retries = orDefault(b.Model.Retries, DefaultModelRetries)
	t := &b.Tools
	if t.Mode == "" {
		t.Mode = DefaultMode
	}
	t.Allow, t.Deny, t.ToolOrder = nonNil(t.Allow), nonNil(t.Deny), nonNil(t.ToolOrder)
	t.MaxParallelToolCalls = orDefault(t.MaxParallelToolCalls, DefaultMaxParallelToolCalls)
	t.MaxParallelSubCalls = orDefault(t.MaxParallelSubCalls, DefaultMaxParallelSubCalls)
	if t.Declared == nil {
		t.Declared = []DeclaredTool{}
	}
	if t.Bash.Network == nil {
		off := false
		t.Bash.Network = &off
	}
	if b.Prompt.Sections == nil {
		b.Prompt.Sections = []Section{}
	}
	if b.Prompt.Variables == nil {
		b.Prompt.Variables = map[string]string{}
	}
	if b.Approval.Policy == "" {
		b.Approval.Policy = DefaultPolicy
	}
	b.Approval.Ask = nonNil(b.Approval.Ask)
	b.Approval.TimeoutMs = orDefault(b.Approval.TimeoutMs, DefaultApprovalTimeoutMs)
	b.Policies.Normalize()
	b.Limits.MaxSteps = orDefault(b.Limits.MaxSteps, DefaultMaxSteps)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func orDefault(p *int, def int) *int {
	if p != nil {
		return p
	}
	return &def
}

// ErrNotFound reports a preset (or preset version) that does not exist, belongs to another
// tenant, or was deleted.
var ErrNotFound = &fault.Error{Code: fault.NotFound, Message: "preset not found"}

// ErrInvalidCursor reports a list cursor this store did not produce.
var ErrInvalidCursor = &fault.Error{Code: fault.Invalid, Message: "invalid cursor"}
