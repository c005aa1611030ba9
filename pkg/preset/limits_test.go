package preset_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/preset"
)

// problemsOf validates b and returns its problems (nil when valid).
func problemsOf(t *testing.T, b preset.Body) *preset.ValidationError {
	t.Helper()
	err := (preset.Rules{ModelHosts: []string{"*"}}).Validate(&b)
	if err == nil {
		return nil
	}
	var ve *preset.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("err %v, want a *ValidationError", err)
	}
	return ve
}

func hasProblem(ve *preset.ValidationError, field, msg string) bool {
	if ve == nil {
		return false
	}
	for _, p := range ve.Problems {
		if p.Field == field && strings.Contains(p.Message, msg) {
			return true
		}
	}
	return false
}

func minimal() preset.Body {
	return preset.Body{Name: "n", Model: preset.Model{Provider: preset.ProviderScripted, Model: "m"}}
}

func names(n, size int) []string {
	out := make([]string, n)
	for i := range out {
		s := fmt.Sprintf("t%d_", i)
		out[i] = s + strings.Repeat("x", max(0, size-len(s)))
	}
	return out
}

// TestFinding1_LimitsRejectLargePresets (issue 9, finding 1): a preset's counts and sizes are
// bounded, so its setup and every prompt assembly are: a body at every limit is valid, one past
// any of them is not (20k prompt variables were accepted and stalled the server).
func TestFinding1_LimitsRejectLargePresets(t *testing.T) {
	t.Parallel()
	atLimits := func() preset.Body {
		b := minimal()
		b.Name = strings.Repeat("n", preset.MaxNameBytes)
		b.Model = preset.Model{Provider: preset.ProviderOpenAI, Model: strings.Repeat("m", preset.MaxModelBytes),
			BaseURL: "https://example.com/" + strings.Repeat("p", preset.MaxBaseURLBytes-len("https://example.com/"))}
		b.Tools.Allow = names(preset.MaxToolNames, preset.MaxToolNameBytes)
		b.Tools.Deny = names(preset.MaxToolNames, preset.MaxToolNameBytes)
		b.Approval.Ask = names(preset.MaxToolNames, preset.MaxToolNameBytes)
		b.Tools.ToolOrder = append(names(preset.MaxToolNames-1, preset.MaxToolNameBytes), preset.UnlistedTools)
		b.Prompt.Persona = strings.Repeat("p", preset.MaxPersonaBytes)
		b.Prompt.Variables = map[string]string{}
		for i := range preset.MaxVariables {
			b.Prompt.Variables[fmt.Sprintf("v%d", i)] = "value"
		}
		for i := range preset.MaxSections {
			o := float64(preset.MaxSectionOrder)
			if i%2 == 1 {
				o = -o
			}
			text := ""
			if i == 0 {
				text = strings.Repeat("s", preset.MaxSectionTextBytes)
			}
			b.Prompt.Sections = append(b.Prompt.Sections, preset.Section{Name: fmt.Sprintf("s%d", i), Order: &o, Text: text})
		}
		return b
	}
	if ve := problemsOf(t, atLimits()); ve != nil {
		t.Fatalf("a preset at the limits is rejected: %v", ve)
	}
	for _, tc := range []struct {
		name, field, msg string
		edit             func(*preset.Body)
	}{
		{"20k variables", "prompt.variables", "at most 256 entries (got 20256)", func(b *preset.Body) {
			for i := range 20000 {
				b.Prompt.Variables[fmt.Sprintf("w%d", i)] = "x"
			}
		}},
		{"sections", "prompt.sections", "at most 64 entries", func(b *preset.Body) {
			o := 1.0
			b.Prompt.Sections = append(b.Prompt.Sections, preset.Section{Name: "extra", Order: &o})
		}},
		{"allow", "tools.allow", "at most 256 entries", func(b *preset.Body) { b.Tools.Allow = append(b.Tools.Allow, "x") }},
		{"deny", "tools.deny", "at most 256 entries", func(b *preset.Body) { b.Tools.Deny = append(b.Tools.Deny, "x") }},
		{"ask", "approval.ask", "at most 256 entries", func(b *preset.Body) { b.Approval.Ask = append(b.Approval.Ask, "x") }},
		{"toolOrder", "tools.toolOrder", "at most 256 entries", func(b *preset.Body) { b.Tools.ToolOrder = append(b.Tools.ToolOrder, "x") }},
		{"tool name", "tools.allow[0]", "at most 128 bytes", func(b *preset.Body) { b.Tools.Allow[0] += "x" }},
		{"toolOrder name", "tools.toolOrder[0]", "at most 128 bytes", func(b *preset.Body) { b.Tools.ToolOrder[0] += "x" }},
		{"name", "name", "at most 200 bytes", func(b *preset.Body) { b.Name += "x" }},
		{"model", "model.model", "at most 200 bytes", func(b *preset.Body) { b.Model.Model += "x" }},
		{"baseUrl", "model.baseUrl", "at most 2048 bytes", func(b *preset.Body) { b.Model.BaseURL += "x" }},
		{"persona", "prompt.persona", "at most 32768 bytes", func(b *preset.Body) { b.Prompt.Persona += "x" }},
		{"section name", "prompt.sections[1].name", "at most 128 bytes", func(b *preset.Body) {
			b.Prompt.Sections[1].Name = strings.Repeat("s", preset.MaxSectionNameBytes+1)
		}},
		{"section text", "prompt.sections[0].text", "at most 32768 bytes", func(b *preset.Body) { b.Prompt.Sections[0].Text += "x" }},
		{"section order", "prompt.sections[0].order", "from -1000000 to 1000000", func(b *preset.Body) {
			o := math.Nextafter(preset.MaxSectionOrder, math.Inf(1))
			b.Prompt.Sections[0].Order = &o
		}},
		{"variable name", "prompt.variables", "at most 64 bytes", func(b *preset.Body) {
			delete(b.Prompt.Variables, "v0")
			b.Prompt.Variables[strings.Repeat("v", preset.MaxVariableNameBytes+1)] = "x"
		}},
		{"variable value", "prompt.variables.v0", "at most 8192 bytes", func(b *preset.Body) {
			b.Prompt.Variables["v0"] = strings.Repeat("x", preset.MaxVariableValueBytes+1)
		}},
		{"prompt total", "prompt", "at most 131072 bytes together", func(b *preset.Body) {
			for i := 1; i < 4; i++ {
				b.Prompt.Sections[i].Text = strings.Repeat("s", preset.MaxSectionTextBytes)
			}
		}},
	} {
		b := atLimits()
		tc.edit(&b)
		if ve := problemsOf(t, b); !hasProblem(ve, tc.field, tc.msg) {
			t.Errorf("%s: problems %v, want %s: ...%s...", tc.name, ve, tc.field, tc.msg)
		}
	}
}

// TestFinding11_NumericSettingsAreBounded (issue 9, finding 11): every numeric setting has an
// upper bound; 2^31-1 was accepted for maxSteps, maxParallelToolCalls and timeoutMs.
func TestFinding11_NumericSettingsAreBounded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		field string
		max   int
		set   func(*preset.Body, int)
	}{
		{"limits.maxSteps", preset.MaxMaxSteps, func(b *preset.Body, n int) { b.Limits.MaxSteps = &n }},
		{"tools.maxParallelToolCalls", preset.MaxMaxParallelToolCalls, func(b *preset.Body, n int) { b.Tools.MaxParallelToolCalls = &n }},
		{"tools.maxParallelSubCalls", preset.MaxMaxParallelSubCalls, func(b *preset.Body, n int) { b.Tools.MaxParallelSubCalls = &n }},
		{"approval.timeoutMs", preset.MaxApprovalTimeoutMs, func(b *preset.Body, n int) { b.Approval.TimeoutMs = &n }},
		{"model.maxTokens", preset.MaxMaxTokens, func(b *preset.Body, n int) { b.Model.MaxTokens = &n }},
		{"model.retries", preset.MaxModelRetries, func(b *preset.Body, n int) { b.Model.Retries = &n }},
	} {
		for n, ok := range map[int]bool{tc.max: true, tc.max + 1: false, math.MaxInt32: false} {
			b := minimal()
			tc.set(&b, n)
			ve := problemsOf(t, b)
			if ok != (ve == nil) {
				t.Errorf("%s %d: problems %v, want ok=%v", tc.field, n, ve, ok)
			}
			if !ok && !hasProblem(ve, tc.field, fmt.Sprintf("<= %d (got %d)", tc.max, n)) {
				t.Errorf("%s %d: problems %v", tc.field, n, ve)
			}
		}
	}
}

// TestFinding11_ValidationErrorsEchoLittle (issue 9, finding 11): a validation error lists at
// most a few problems, and repeats at most a short prefix of any value, whatever the body: a
// body of huge, many or invalid names made errors (and log lines) as large as the body.
func TestFinding11_ValidationErrorsEchoLittle(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("é", 1<<20)
	b := minimal()
	b.Model.Provider = huge
	b.Tools.Mode = huge
	b.Approval.Policy = huge
	b.Model.ReasoningEffort = huge
	b.Tools.ToolOrder = []string{huge, huge, preset.UnlistedTools}
	b.Prompt.Variables = map[string]string{}
	for i := range 20000 {
		b.Prompt.Variables[fmt.Sprintf("Bad-%d-%s", i, strings.Repeat("x", 100))] = "x"
	}
	o := 1.0
	b.Prompt.Sections = []preset.Section{{Name: huge, Order: &o}, {Name: huge, Order: &o}}
	b.Tools.Allow = make([]string, 20000) // every entry empty
	ve := problemsOf(t, b)
	if ve == nil || len(ve.Problems) != 20 || ve.Omitted == 0 {
		t.Fatalf("problems %d, omitted %d; want 20 listed and the rest counted", len(ve.Problems), ve.Omitted)
	}
	msg := ve.Error()
	if len(msg) > 8<<10 {
		t.Fatalf("the error is %d bytes: %.300s", len(msg), msg)
	}
	if !strings.Contains(msg, `unknown provider "`+strings.Repeat("é", 32)+`…"`) ||
		!strings.HasSuffix(msg, fmt.Sprintf("and %d more problems", ve.Omitted)) {
		t.Fatalf("message %.600s", msg)
	}
}
