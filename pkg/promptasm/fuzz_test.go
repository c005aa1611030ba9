package promptasm

import (
	"errors"
	"strings"
	"testing"
)

// FuzzInterpolate checks that interpolation never panics, fails only with its own sentinels,
// leaves text without "{{" unchanged, and never scans substituted values.
func FuzzInterpolate(f *testing.F) {
	for _, seed := range []string{
		"Model {{model}}", "{{nope}}", "{{constructor}}", "{{x}}", "{{ model }}", "{{}}", "{{model",
		"a {{ b", "{{{model}}}", "x }} {{model}}", "{{a{{model}}", "é{{model}}ü", "{{gone}}", "",
	} {
		f.Add(seed)
	}
	vars := map[string]Value{
		"model": {Text: "deepseek-chat"},
		"x":     {Text: "{{model}}"},
		"gone":  {Absent: true},
	}
	f.Fuzz(func(t *testing.T, text string) {
		got, err := interpolate(text, vars)
		if err != nil {
			if !errors.Is(err, ErrMalformedReference) && !errors.Is(err, ErrUnknownVariable) && !errors.Is(err, ErrNoValue) {
				t.Fatalf("interpolate(%q) error %v is not a sentinel", text, err)
			}
			return
		}
		if !strings.Contains(text, "{{") && got != text {
			t.Fatalf("interpolate(%q) = %q, want it unchanged", text, got)
		}
		// Replacing {{x}} by its value and rendering again would expand the value; the single
		// pass must not, so the output holds exactly as many "{{model}}" as {{x}} references.
		if want := strings.Count(text, "{{x}}"); strings.Count(got, "{{model}}") < want {
			t.Fatalf("interpolate(%q) = %q rescanned a substituted value", text, got)
		}
	})
}
