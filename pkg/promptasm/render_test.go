package promptasm

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestPRM7_Interpolate(t *testing.T) {
	t.Parallel()
	vars := map[string]Value{
		"model": {Text: "deepseek-chat"},
		"x":     {Text: "{{model}}"},
		"empty": {},
		"gone":  {Absent: true},
	}
	cases := []struct {
		text string
		want string
		err  error
	}{
		{"Model {{model}}", "Model deepseek-chat", nil},
		{"{{model}}{{model}}", "deepseek-chatdeepseek-chat", nil},
		{"no references", "no references", nil},
		{"x }} {{model}}", "x }} deepseek-chat", nil},
		{"value {{x}} stays", "value {{model}} stays", nil},
		{"{{empty}}", "", nil},
		{"{{model", "{{model", nil},
		{"a {{ b", "a {{ b", nil},
		{"{{model}} then {{", "deepseek-chat then {{", nil},
		{"{{{", "{{{", nil},
		{"{{nope}}", "", ErrUnknownVariable},
		{"{{constructor}}", "", ErrUnknownVariable},
		{"{{gone}}", "", ErrNoValue},
		{"{{ model }}", "", ErrMalformedReference},
		{"{{}}", "", ErrMalformedReference},
		{"{{Model}}", "", ErrMalformedReference},
		{"{{1x}}", "", ErrMalformedReference},
		{"{{{model}}}", "", ErrMalformedReference},
		{"{{a{{model}}", "", ErrMalformedReference},
		{"{{ lone then }} later", "", ErrMalformedReference},
		{"{{model}} {{ and }}", "", ErrMalformedReference},
	}
	for _, tc := range cases {
		got, err := interpolate(tc.text, vars)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("interpolate(%q) error = %v, want %v", tc.text, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("interpolate(%q) = %q, %v; want %q", tc.text, got, err, tc.want)
		}
	}
}

func TestPRM7_ErrorMessages(t *testing.T) {
	t.Parallel()
	vars := map[string]Value{"model": {Text: "m"}, "cwd": {Text: "/"}}
	cases := map[string]string{
		"{{nope}}":                  `unknown prompt variable "{{nope}}"; registered variables: cwd, model`,
		"{{ model }}":               `malformed prompt variable reference "{{ model }}" (names match [a-z][a-z0-9_]*)`,
		"abc {{ x {{y}} and more}}": `malformed prompt variable reference at "{{ x {{y}} and m…" (a reference is {{name}}, name matching [a-z][a-z0-9_]*)`,
	}
	for text, want := range cases {
		if _, err := interpolate(text, vars); err == nil || err.Error() != want {
			t.Errorf("interpolate(%q) error = %v\nwant %s", text, err, want)
		}
	}
	if _, err := interpolate("{{x}}", nil); err == nil || !strings.HasSuffix(err.Error(), "registered variables: (none)") {
		t.Errorf("no variables: error = %v", err)
	}
}

func TestPRM7_DropEmptyJoinWithBlankLine(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{IncludeHarnessIdentity: new(false)})
	must(t)(r.Variable(Global, "nothing", constVar("")))
	must(t)(r.Section(Global, Section{Name: "a", Order: 1, Text: "A\nstill A"}))
	must(t)(r.Section(Global, Section{Name: "empty", Order: 2}))
	must(t)(r.Section(Global, Section{Name: "rendered-empty", Order: 3, Text: "{{nothing}}"}))
	must(t)(r.Section(Global, Section{Name: "func-empty", Order: 4, TextFunc: func(context.Context, Input) (string, error) { return "", nil }}))
	must(t)(r.Section(Global, Section{Name: "b", Order: 5, Text: "B"}))
	res := assemble(t, r, Input{})
	if res.System != "A\nstill A\n\nB" || sectionNames(res.Sections) != "a,b" {
		t.Fatalf("System = %q, sections = %s", res.System, sectionNames(res.Sections))
	}
}

func TestPRM7_ErrorNamesTheSection(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{Persona: "{{nope}}"})
	ae := assembleErr(t, r, Input{Provider: "p", Model: "m", CWD: "/"}, ErrUnknownVariable)
	want := `assemble system prompt: section "deployment:persona": unknown prompt variable "{{nope}}"; registered variables: cwd, model, provider`
	if ae.Error() != want {
		t.Fatalf("error = %q\nwant    %q", ae.Error(), want)
	}
}

func TestScenario40_PromptVariables(t *testing.T) {
	t.Parallel()
	t.Run("persona interpolated", func(t *testing.T) {
		t.Parallel()
		r := newRegistry(t, Config{IncludeHarnessIdentity: new(false), Persona: "Model {{model}}"})
		if got := assemble(t, r, Input{Model: "deepseek-chat"}).System; got != "Model deepseek-chat" {
			t.Fatalf("System = %q", got)
		}
	})
	t.Run("unknown lists the registered variables", func(t *testing.T) {
		t.Parallel()
		r := newRegistry(t, Config{Persona: "{{nope}}"})
		must(t)(r.Variable(Global, "team", constVar("core")))
		ae := assembleErr(t, r, Input{}, ErrUnknownVariable)
		if !strings.HasSuffix(ae.Error(), "registered variables: cwd, model, provider, team") {
			t.Fatalf("error = %q", ae.Error())
		}
	})
	t.Run("constructor is unknown", func(t *testing.T) {
		t.Parallel()
		assembleErr(t, newRegistry(t, Config{Persona: "{{constructor}}"}), Input{}, ErrUnknownVariable)
	})
	t.Run("a value containing a reference stays literal", func(t *testing.T) {
		t.Parallel()
		r := newRegistry(t, Config{IncludeHarnessIdentity: new(false), Persona: "Say {{x}}"})
		must(t)(r.Variable(Global, "x", constVar("{{x}}")))
		if got := assemble(t, r, Input{}).System; got != "Say {{x}}" {
			t.Fatalf("System = %q", got)
		}
	})
	t.Run("two complete sections reject", func(t *testing.T) {
		t.Parallel()
		r := newRegistry(t, Config{})
		must(t)(r.Section(Global, Section{Name: "a", Text: "A", Complete: true}))
		must(t)(r.Section(Global, Section{Name: "b", Text: "B", Complete: true}))
		assembleErr(t, r, Input{}, ErrMultipleComplete)
	})
}
