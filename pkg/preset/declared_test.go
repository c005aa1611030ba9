package preset_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/registry"
)

// declaredBody is a valid preset body whose tools.declared is the given JSON list.
func declaredBody(t *testing.T, list string) preset.Body {
	t.Helper()
	return body(t, `{"name":"n","model":{"provider":"scripted","model":"m"},"tools":{"declared":`+list+`}}`)
}

// TestE6_DeclaredToolsValidate: a client-executed tool a preset declares has executor client, a
// unique name of the wire's characters that is neither run_code nor a built-in tool's, an object
// schema of lossless JSON within registry.MaxClientParameters, and a positive timeout; a preset
// declares at most preset.MaxDeclaredTools of them. Every broken rule is a problem at its field.
func TestE6_DeclaredToolsValidate(t *testing.T) {
	t.Parallel()
	const schema = `{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`
	tool := func(name string) string {
		return fmt.Sprintf(`{"name":%q,"description":"asks the user","parameters":%s,"executor":"client"}`, name, schema)
	}
	cases := []struct {
		name  string
		list  string
		field string // "" means valid
		msg   string
	}{
		{"valid", `[` + tool("confirm") + `,` + tool("pick-file_2") + `]`, "", ""},
		{"with timeout", `[{"name":"a","parameters":{"type":"object"},"executor":"client","timeoutMs":5000}]`, "", ""},
		{"empty list", `[]`, "", ""},
		{"no executor", `[{"name":"a","parameters":{"type":"object"}}]`, "tools.declared[0].executor", `unknown executor ""`},
		{"server executor", `[{"name":"a","parameters":{"type":"object"},"executor":"server"}]`, "tools.declared[0].executor", `unknown executor "server" (want "client")`},
		{"no name", `[{"parameters":{"type":"object"},"executor":"client"}]`, "tools.declared[0].name", "is required"},
		{"run_code", `[` + tool("run_code") + `]`, "tools.declared[0].name", `"run_code" is reserved`},
		{"built-in name", `[` + tool("bash") + `]`, "tools.declared[0].name", `"bash" is the name of a built-in tool`},
		{"duplicate", `[` + tool("a") + `,` + tool("a") + `]`, "tools.declared[1].name", `duplicate tool "a"`},
		{"space in name", `[` + tool("a b") + `]`, "tools.declared[0].name", "letters, digits, underscores or hyphens"},
		{"dot in name", `[` + tool("ui.confirm") + `]`, "tools.declared[0].name", "letters, digits, underscores or hyphens"},
		{"long name", `[` + tool(strings.Repeat("x", 65)) + `]`, "tools.declared[0].name", "1 to 64"},
		{"no parameters", `[{"name":"a","executor":"client"}]`, "tools.declared[0].parameters", "is required"},
		{"null parameters", `[{"name":"a","parameters":null,"executor":"client"}]`, "tools.declared[0].parameters", "is required"},
		{"array parameters", `[{"name":"a","parameters":[],"executor":"client"}]`, "tools.declared[0].parameters", "must be a JSON Schema object"},
		{"string schema", `[{"name":"a","parameters":{"type":"string"},"executor":"client"}]`, "tools.declared[0].parameters", `("type": "object")`},
		{"untyped schema", `[{"name":"a","parameters":{"properties":{}},"executor":"client"}]`, "tools.declared[0].parameters", `("type": "object")`},
		{"timeout zero", `[{"name":"a","parameters":{"type":"object"},"executor":"client","timeoutMs":0}]`, "tools.declared[0].timeoutMs", "integer >= 1"},
		{"timeout negative", `[{"name":"a","parameters":{"type":"object"},"executor":"client","timeoutMs":-5}]`, "tools.declared[0].timeoutMs", "integer >= 1"},
		{"long description", `[{"name":"a","description":"` + strings.Repeat("d", preset.MaxDeclaredDescriptionBytes+1) +
			`","parameters":{"type":"object"},"executor":"client"}]`, "tools.declared[0].description", "must be at most"},
	}
	rules := preset.Rules{BuiltinTools: []string{"bash", "echo"}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := declaredBody(t, tc.list)
			ve := validate(t, rules, b)
			if tc.field == "" {
				if ve != nil {
					t.Fatalf("valid body rejected: %v", ve)
				}
				return
			}
			if !hasProblem(ve, tc.field, tc.msg) {
				t.Fatalf("problems %v; want %s: ...%s...", ve, tc.field, tc.msg)
			}
		})
	}
}

// TestE6_DeclaredToolsLimits: the count and the parameters' size are bounded, the schema must be
// lossless JSON (valid UTF-8), and a body at the limits is valid.
func TestE6_DeclaredToolsLimits(t *testing.T) {
	t.Parallel()
	decl := func(name string, params json.RawMessage) preset.DeclaredTool {
		return preset.DeclaredTool{Name: name, Parameters: params, Executor: preset.ExecutorClient}
	}
	// A schema of exactly registry.MaxClientParameters bytes, and one a byte longer.
	pad := func(n int) json.RawMessage {
		s := `{"type":"object","description":""}`
		return json.RawMessage(strings.Replace(s, `""`, `"`+strings.Repeat("p", n-len(s))+`"`, 1))
	}
	atLimit := minimal()
	for i := range preset.MaxDeclaredTools {
		atLimit.Tools.Declared = append(atLimit.Tools.Declared, decl(fmt.Sprintf("t%d", i), json.RawMessage(`{"type":"object"}`)))
	}
	atLimit.Tools.Declared[0].Parameters = pad(registry.MaxClientParameters)
	if ve := problemsOf(t, atLimit); ve != nil {
		t.Fatalf("a preset at the limits is invalid: %v", ve)
	}
	tooMany := atLimit
	tooMany.Tools.Declared = append(append([]preset.DeclaredTool(nil), atLimit.Tools.Declared...), decl("one_more", json.RawMessage(`{"type":"object"}`)))
	if ve := problemsOf(t, tooMany); !hasProblem(ve, "tools.declared", fmt.Sprintf("at most %d entries (got %d)", preset.MaxDeclaredTools, preset.MaxDeclaredTools+1)) {
		t.Errorf("too many declared tools: %v", ve)
	}
	big := minimal()
	big.Tools.Declared = []preset.DeclaredTool{decl("a", pad(registry.MaxClientParameters+1))}
	if ve := problemsOf(t, big); !hasProblem(ve, "tools.declared[0].parameters", fmt.Sprintf("at most %d bytes", registry.MaxClientParameters)) {
		t.Errorf("oversized parameters: %v", ve)
	}
	bad := minimal()
	bad.Tools.Declared = []preset.DeclaredTool{decl("a", json.RawMessage("{\"type\":\"object\",\"description\":\"\xff\"}"))}
	if ve := problemsOf(t, bad); !hasProblem(ve, "tools.declared[0].parameters", "lossless JSON") {
		t.Errorf("invalid UTF-8 in parameters: %v", ve)
	}
}

// TestE6_DeclaredToolsRoundTrip: Normalize makes tools.declared a non-nil list, left out of the
// JSON while empty, and a declared tool's parameters come back from JSON as they were written.
func TestE6_DeclaredToolsRoundTrip(t *testing.T) {
	t.Parallel()
	b := minimal()
	b.Normalize()
	if b.Tools.Declared == nil {
		t.Fatal("Normalize left tools.declared nil")
	}
	if out, _ := json.Marshal(b); strings.Contains(string(out), `"declared"`) {
		t.Errorf("normalized JSON %s has tools.declared, which a preset without declared tools leaves out", out)
	}
	const schema = `{"type":"object", "properties":{"z":{"type":"integer"},"a":{"type":"string"}}}`
	d := declaredBody(t, `[{"name":"ask_user","description":"d","parameters":`+schema+`,"executor":"client","timeoutMs":60000}]`)
	if err := (preset.Rules{}).Validate(&d); err != nil {
		t.Fatal(err)
	}
	got := d.Tools.Declared[0]
	if string(got.Parameters) != schema || got.Executor != preset.ExecutorClient || got.TimeoutMs == nil || *got.TimeoutMs != 60000 {
		t.Fatalf("declared tool %+v", got)
	}
}
