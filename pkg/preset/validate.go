package preset

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm/openai"
)

// Rules are the deployment settings validation depends on.
type Rules struct {
	// ModelHosts are the hosts (host or host:port) a preset's model.baseUrl may point at, a guard
	// against server-side request forgery. "*" allows any host. Empty allows no baseUrl at all.
	// A host without a port allows the default port of the URL's scheme only; the rules are
	// openai.AllowedBaseURL's, the same the agents apply when they build the model client.
	ModelHosts []string
}

// Problem is one reason a preset body is invalid. Field is the JSON path of the offending value.
type Problem struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// ValidationError lists every problem found in a preset body.
type ValidationError struct {
	Problems []Problem
}

// Unwrap makes a preset validation error an invalid-request fault (fault.Invalid).
func (e *ValidationError) Unwrap() error {
	return &fault.Error{Code: fault.Invalid, Message: e.Error()}
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.Field + ": " + p.Message
	}
	return "invalid preset: " + strings.Join(parts, "; ")
}

var variableName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// Validate normalizes b (fills defaults) and checks it, returning a *ValidationError that lists
// every problem, or nil.
func (r Rules) Validate(b *Body) error {
	b.Normalize()
	var v validator
	v.name(b.Name)
	v.model(b.Model, r.ModelHosts)
	v.tools(b.Tools)
	v.prompt(b.Prompt)
	v.approval(b.Approval)
	v.atLeastOne("limits.maxSteps", *b.Limits.MaxSteps)
	if len(v.problems) > 0 {
		return &ValidationError{Problems: v.problems}
	}
	return nil
}

type validator struct {
	problems []Problem
}

func (v *validator) add(field, format string, args ...any) {
	v.problems = append(v.problems, Problem{Field: field, Message: fmt.Sprintf(format, args...)})
}

func (v *validator) name(name string) {
	if strings.TrimSpace(name) == "" {
		v.add("name", "is required")
	} else if len(name) > 200 {
		v.add("name", "must be at most 200 characters")
	}
}

// reasoningEfforts are the values model.reasoningEffort accepts ("off" disables reasoning).
var reasoningEfforts = []string{"off", "minimal", "low", "medium", "high", "max"}

func (v *validator) model(m Model, hosts []string) {
	switch m.Provider {
	case ProviderDeepSeek, ProviderOpenAI, ProviderScripted:
	default:
		v.add("model.provider", `unknown provider %q (want "deepseek", "openai" or "scripted")`, m.Provider)
	}
	if strings.TrimSpace(m.Model) == "" {
		v.add("model.model", "is required")
	}
	if m.MaxTokens != nil {
		v.atLeastOne("model.maxTokens", *m.MaxTokens)
	}
	if m.ReasoningEffort != "" && !slices.Contains(reasoningEfforts, m.ReasoningEffort) {
		v.add("model.reasoningEffort", "unknown reasoning effort %q (want one of %s)", m.ReasoningEffort,
			strings.Join(reasoningEfforts, ", "))
	}
	if n := *m.Retries; n < 0 || n > MaxModelRetries {
		v.add("model.retries", "must be an integer from 0 to %d (got %d)", MaxModelRetries, n)
	}
	if m.BaseURL == "" {
		return
	}
	if m.Provider == ProviderScripted {
		v.add("model.baseUrl", "must be empty for the scripted provider")
		return
	}
	if _, err := openai.AllowedBaseURL(m.BaseURL, hosts); errors.Is(err, openai.ErrHostNotAllowed) {
		v.add("model.baseUrl", "host %q is not allowed (the server's DSHD_MODEL_HOSTS lists the allowed hosts; "+
			"a host without a port allows only the scheme's default port)", hostOf(m.BaseURL))
	} else if err != nil {
		v.add("model.baseUrl", "must be an absolute http or https URL without credentials, query or fragment")
	}
}

func (v *validator) tools(t Tools) {
	switch t.Mode {
	case ModeNative, ModeCode, ModeBoth:
	default:
		v.add("tools.mode", "unknown mode %q (want native, code or both)", t.Mode)
	}
	v.names("tools.allow", t.Allow)
	v.names("tools.deny", t.Deny)
	v.toolOrder(t.ToolOrder)
	v.atLeastOne("tools.maxParallelToolCalls", *t.MaxParallelToolCalls)
	v.atLeastOne("tools.maxParallelSubCalls", *t.MaxParallelSubCalls)
}

// toolOrder checks PRM-5: a non-empty order lists <unlisted-tools> exactly once and no name twice.
func (v *validator) toolOrder(order []string) {
	if len(order) == 0 {
		return
	}
	markers := 0
	seen := map[string]bool{}
	for i, name := range order {
		switch {
		case name == UnlistedTools:
			markers++
		case name == "":
			v.add(fmt.Sprintf("tools.toolOrder[%d]", i), "must not be empty")
		case seen[name]:
			v.add(fmt.Sprintf("tools.toolOrder[%d]", i), "duplicate tool %q", name)
		}
		seen[name] = true
	}
	if markers != 1 {
		v.add("tools.toolOrder", "must contain %q exactly once (found %d)", UnlistedTools, markers)
	}
}

func (v *validator) prompt(p Prompt) {
	seen := map[string]bool{}
	complete := 0
	for i, s := range p.Sections {
		field := fmt.Sprintf("prompt.sections[%d]", i)
		switch {
		case strings.TrimSpace(s.Name) == "":
			v.add(field+".name", "is required")
		case seen[s.Name]:
			v.add(field+".name", "duplicate section name %q", s.Name)
		}
		seen[s.Name] = true
		if s.Order == nil {
			v.add(field+".order", "is required")
		} else if math.IsNaN(*s.Order) || math.IsInf(*s.Order, 0) {
			v.add(field+".order", "must be a finite number")
		}
		if s.Complete {
			complete++
		}
	}
	if complete > 1 {
		v.add("prompt.sections", "at most one section may be complete (found %d)", complete)
	}
	for _, name := range sortedKeys(p.Variables) {
		if !variableName.MatchString(name) {
			v.add("prompt.variables", "variable name %q must match [a-z][a-z0-9_]*", name)
		}
	}
}

func (v *validator) approval(a Approval) {
	switch a.Policy {
	case PolicyAsk, PolicyNever:
	default:
		v.add("approval.policy", `unknown policy %q (want "ask" or "never")`, a.Policy)
	}
	v.names("approval.ask", a.Ask)
	v.atLeastOne("approval.timeoutMs", *a.TimeoutMs)
}

func (v *validator) names(field string, names []string) {
	for i, n := range names {
		if strings.TrimSpace(n) == "" {
			v.add(fmt.Sprintf("%s[%d]", field, i), "must not be empty")
		}
	}
}

func (v *validator) atLeastOne(field string, n int) {
	if n < 1 {
		v.add(field, "must be an integer >= 1 (got %d)", n)
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
