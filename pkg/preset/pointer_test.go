package preset

import "testing"

func TestFieldPointer(t *testing.T) {
	for field, want := range map[string]string{
		"":                                 "",
		"name":                             "/name",
		"model.baseUrl":                    "/model/baseUrl",
		"tools.allow[2]":                   "/tools/allow/2",
		"prompt.sections[0].order":         "/prompt/sections/0/order",
		"prompt.variables.a.b/c~":          "/prompt/variables/a.b~1c~0",
		"prompt.variables":                 "/prompt/variables",
		"policies.preExecute[3].match.cmd": "/policies/preExecute/3/match/cmd",
		"policies.guards[1].tools[0]":      "/policies/guards/1/tools/0",
		"tools.declared[0].parameters":     "/tools/declared/0/parameters",
		"policies.webhooks.timeoutMs":      "/policies/webhooks/timeoutMs",
	} {
		if got := FieldPointer(field); got != want {
			t.Errorf("FieldPointer(%q) = %q, want %q", field, got, want)
		}
	}
}

// TestValidateListsEveryField: a body with three bad fields reports the three, each with its
// pointer.
func TestValidateListsEveryField(t *testing.T) {
	b := Body{Name: "", Model: Model{Provider: "nope", Model: "m"}, Tools: Tools{Allow: []string{"a", "b", " "}}}
	err := Rules{}.Validate(&b)
	ve, ok := err.(*ValidationError)
	if !ok {
		t.Fatalf("Validate = %v, want a *ValidationError", err)
	}
	var got []string
	for _, p := range ve.Problems {
		got = append(got, p.Pointer())
	}
	want := []string{"/name", "/model/provider", "/tools/allow/2"}
	if len(got) != len(want) {
		t.Fatalf("pointers %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("pointers %v, want %v", got, want)
		}
	}
}
