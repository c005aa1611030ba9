package preset

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm/openai"
	"github.com/dshd/dshd/pkg/policy"
	"github.com/google/uuid"
)

// Rules are the deployment settings validation depends on.
type Rules struct {
	// ModelHosts are the hosts (host or host:port) a preset's model.baseUrl may point at, a guard
	// against server-side request forgery. "*" allows any host. Empty allows no baseUrl at all.
	// A host without a port allows the default port of the URL's scheme only; the rules are
	// openai.AllowedBaseURL's, the same the agents apply when they build the model client.
	ModelHosts []string
	// ScriptedDisabled refuses presets of the scripted provider (DSHD_SCRIPTED_MODEL=0). The
	// server takes its Rules from its agents (agents.Agents.Rules), so that a preset it accepts is
	// one its agents can run.
	ScriptedDisabled bool
	// SandboxNetworkDisabled refuses presets whose tools.bash.network is on (DSHD_SANDBOX_NETWORK=0):
	// the operator does not let sandboxed commands use the network.
	SandboxNetworkDisabled bool
	// PolicyWebhookKey is the operator's key the signing secret of each preset's policy webhooks
	// is derived from (policy.Secret; WebhookSecret). Empty: policy webhooks are disabled, and a
	// preset naming one is refused.
	PolicyWebhookKey []byte
	// PolicyWebhookHTTP allows http:// policy webhook URLs (tests); otherwise only https.
	PolicyWebhookHTTP bool
	// PolicyWebhookPrivate allows policy webhook hosts that are loopback, private or link-local
	// addresses (tests, private deployments).
	PolicyWebhookPrivate bool
	// BuiltinTools are the names of the server's built-in tools, which a declared tool
	// (tools.declared) may not take. The server takes them from its agents (agents.Agents.Rules).
	BuiltinTools []string
}

// WebhookSecret returns the signing secret of the policy webhooks of preset id; ok is false
// while policy webhooks are disabled (no PolicyWebhookKey).
func (r Rules) WebhookSecret(id uuid.UUID) (secret string, ok bool) {
	if len(r.PolicyWebhookKey) == 0 {
		return "", false
	}
	return policy.Secret(r.PolicyWebhookKey, id), true
}

// Problem is one reason a preset body is invalid. Field is the JSON path of the offending value.
type Problem struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// ValidationError lists the problems found in a preset body: the first maxProblems of them, and
// how many more there are (Omitted). A message repeats at most a short prefix of any value.
type ValidationError struct {
	Problems []Problem
	Omitted  int
}

// Unwrap makes a preset validation error an invalid-request fault (fault.Invalid).
func (e *ValidationError) Unwrap() error {
	return &fault.Error{Code: fault.Invalid, Message: e.Error()}
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Problems), len(e.Problems)+1)
	for i, p := range e.Problems {
		parts[i] = p.Field + ": " + p.Message
	}
	if e.Omitted > 0 {
		parts = append(parts, fmt.Sprintf("and %d more problems", e.Omitted))
	}
	return "invalid preset: " + strings.Join(parts, "; ")
}

var variableName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// Validate normalizes b (fills defaults) and checks it, returning a *ValidationError that lists
// its problems, or nil.
func (r Rules) Validate(b *Body) error {
	b.Normalize()
	var v validator
	v.name(b.Name)
	v.model(b.Model, r)
	v.tools(b.Tools)
	v.declared(b.Tools.Declared, r.BuiltinTools)
	if *b.Tools.Bash.Network && r.SandboxNetworkDisabled {
		v.add("tools.bash.network", "sandboxed commands may not use the network on this server (DSHD_SANDBOX_NETWORK=0)")
	}
	v.prompt(b.Prompt)
	v.approval(b.Approval)
	policy.Check(b.Policies, policy.Rules{WebhooksEnabled: len(r.PolicyWebhookKey) > 0,
		AllowHTTP: r.PolicyWebhookHTTP, AllowPrivate: r.PolicyWebhookPrivate}, v.add)
	v.between("limits.maxSteps", *b.Limits.MaxSteps, 1, MaxMaxSteps)
	if len(v.problems) > 0 {
		return &ValidationError{Problems: v.problems, Omitted: v.omitted}
	}
	return nil
}

type validator struct {
	problems []Problem
	omitted  int
}

// add records a problem; past maxProblems it only counts it. Values repeated in the message go
// through echo.
func (v *validator) add(field, format string, args ...any) {
	if len(v.problems) == maxProblems {
		v.omitted++
		return
	}
	v.problems = append(v.problems, Problem{Field: field, Message: fmt.Sprintf(format, args...)})
}

// echo returns s for a message: at most maxEcho bytes, cut at a rune boundary and marked with
// "…" when cut.
func echo(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	cut := maxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// size checks that a string is at most max bytes.
func (v *validator) size(field, s string, max int) {
	if len(s) > max {
		v.add(field, "must be at most %d bytes (got %d)", max, len(s))
	}
}

// count checks that a list has at most max entries.
func (v *validator) count(field string, n, max int) {
	if n > max {
		v.add(field, "must have at most %d entries (got %d)", max, n)
	}
}

func (v *validator) name(name string) {
	if strings.TrimSpace(name) == "" {
		v.add("name", "is required")
	}
	v.size("name", name, MaxNameBytes)
}

// reasoningEfforts are the values model.reasoningEffort accepts ("off" disables reasoning).
var reasoningEfforts = []string{"off", "minimal", "low", "medium", "high", "max"}

func (v *validator) model(m Model, r Rules) {
	switch m.Provider {
	case ProviderDeepSeek, ProviderOpenAI:
	case ProviderScripted:
		if r.ScriptedDisabled {
			v.add("model.provider", `the scripted provider is disabled on this server (DSHD_SCRIPTED_MODEL=0)`)
		}
	default:
		v.add("model.provider", `unknown provider %q (want "deepseek", "openai" or "scripted")`, echo(m.Provider))
	}
	if strings.TrimSpace(m.Model) == "" {
		v.add("model.model", "is required")
	}
	v.size("model.model", m.Model, MaxModelBytes)
	if m.MaxTokens != nil {
		v.between("model.maxTokens", *m.MaxTokens, 1, MaxMaxTokens)
	}
	if m.ReasoningEffort != "" && !slices.Contains(reasoningEfforts, m.ReasoningEffort) {
		v.add("model.reasoningEffort", "unknown reasoning effort %q (want one of %s)", echo(m.ReasoningEffort),
			strings.Join(reasoningEfforts, ", "))
	}
	v.between("model.retries", *m.Retries, 0, MaxModelRetries)
	if m.Credential != "" && m.Provider == ProviderScripted {
		v.add("model.credential", "must be empty for the scripted provider")
	}
	v.size("model.credential", m.Credential, MaxCredentialRefBytes)
	if m.BaseURL == "" {
		return
	}
	if m.Provider == ProviderScripted {
		v.add("model.baseUrl", "must be empty for the scripted provider")
		return
	}
	if len(m.BaseURL) > MaxBaseURLBytes {
		v.size("model.baseUrl", m.BaseURL, MaxBaseURLBytes)
		return
	}
	if _, err := openai.AllowedBaseURL(m.BaseURL, r.ModelHosts); errors.Is(err, openai.ErrHostNotAllowed) {
		v.add("model.baseUrl", "host %q is not allowed (the server's DSHD_MODEL_HOSTS lists the allowed hosts; "+
			"a host without a port allows only the scheme's default port)", echo(hostOf(m.BaseURL)))
	} else if err != nil {
		v.add("model.baseUrl", "must be an absolute http or https URL without credentials, query or fragment")
	}
}

func (v *validator) tools(t Tools) {
	switch t.Mode {
	case ModeNative, ModeCode, ModeBoth:
	default:
		v.add("tools.mode", "unknown mode %q (want native, code or both)", echo(t.Mode))
	}
	v.names("tools.allow", t.Allow)
	v.names("tools.deny", t.Deny)
	v.toolOrder(t.ToolOrder)
	v.between("tools.maxParallelToolCalls", *t.MaxParallelToolCalls, 1, MaxMaxParallelToolCalls)
	v.between("tools.maxParallelSubCalls", *t.MaxParallelSubCalls, 1, MaxMaxParallelSubCalls)
}

// toolOrder checks PRM-5: a non-empty order lists <unlisted-tools> exactly once and no name twice.
func (v *validator) toolOrder(order []string) {
	if len(order) == 0 {
		return
	}
	v.count("tools.toolOrder", len(order), MaxToolNames)
	markers := 0
	seen := map[string]bool{}
	for i, name := range order {
		field := fmt.Sprintf("tools.toolOrder[%d]", i)
		switch {
		case name == UnlistedTools:
			markers++
		case name == "":
			v.add(field, "must not be empty")
		case seen[name]:
			v.add(field, "duplicate tool %q", echo(name))
		}
		v.size(field, name, MaxToolNameBytes)
		seen[name] = true
	}
	if markers != 1 {
		v.add("tools.toolOrder", "must contain %q exactly once (found %d)", UnlistedTools, markers)
	}
}

func (v *validator) prompt(p Prompt) {
	v.size("prompt.persona", p.Persona, MaxPersonaBytes)
	total := len(p.Persona)
	v.count("prompt.sections", len(p.Sections), MaxSections)
	seen := map[string]bool{}
	complete := 0
	for i, s := range p.Sections {
		field := fmt.Sprintf("prompt.sections[%d]", i)
		switch {
		case strings.TrimSpace(s.Name) == "":
			v.add(field+".name", "is required")
		case seen[s.Name]:
			v.add(field+".name", "duplicate section name %q", echo(s.Name))
		}
		seen[s.Name] = true
		v.size(field+".name", s.Name, MaxSectionNameBytes)
		v.size(field+".text", s.Text, MaxSectionTextBytes)
		total += len(s.Name) + len(s.Text)
		switch {
		case s.Order == nil:
			v.add(field+".order", "is required")
		case math.IsNaN(*s.Order) || math.IsInf(*s.Order, 0):
			v.add(field+".order", "must be a finite number")
		case math.Abs(*s.Order) > MaxSectionOrder:
			v.add(field+".order", "must be from %d to %d (got %g)", -MaxSectionOrder, MaxSectionOrder, *s.Order)
		}
		if s.Complete {
			complete++
		}
	}
	if complete > 1 {
		v.add("prompt.sections", "at most one section may be complete (found %d)", complete)
	}
	v.count("prompt.variables", len(p.Variables), MaxVariables)
	for _, name := range sortedKeys(p.Variables) {
		value := p.Variables[name]
		total += len(name) + len(value)
		switch {
		case len(name) > MaxVariableNameBytes:
			v.add("prompt.variables", "variable name %q must be at most %d bytes (got %d)", echo(name),
				MaxVariableNameBytes, len(name))
		case !variableName.MatchString(name):
			v.add("prompt.variables", "variable name %q must match [a-z][a-z0-9_]*", echo(name))
		}
		if len(value) > MaxVariableValueBytes {
			v.add("prompt.variables."+echo(name), "must be at most %d bytes (got %d)", MaxVariableValueBytes, len(value))
		}
	}
	if total > MaxPromptBytes {
		v.add("prompt", "persona, sections and variables must be at most %d bytes together (got %d)", MaxPromptBytes, total)
	}
}

func (v *validator) approval(a Approval) {
	switch a.Policy {
	case PolicyAsk, PolicyNever:
	default:
		v.add("approval.policy", `unknown policy %q (want "ask" or "never")`, echo(a.Policy))
	}
	v.names("approval.ask", a.Ask)
	v.between("approval.timeoutMs", *a.TimeoutMs, 1, MaxApprovalTimeoutMs)
}

// names checks a list of tool names: at most MaxToolNames, none empty or longer than
// MaxToolNameBytes.
func (v *validator) names(field string, names []string) {
	v.count(field, len(names), MaxToolNames)
	for i, n := range names {
		f := fmt.Sprintf("%s[%d]", field, i)
		if strings.TrimSpace(n) == "" {
			v.add(f, "must not be empty")
		}
		v.size(f, n, MaxToolNameBytes)
	}
}

// between checks that an integer setting is from lo to hi.
func (v *validator) between(field string, n, lo, hi int) {
	if n < lo || n > hi {
		v.add(field, "must be an integer >= %d and <= %d (got %d)", lo, hi, n)
	}
}

// hostOf returns the host[:port] of a URL, for messages.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
