package preset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"unicode/utf8"

	"github.com/dshd/dshd/pkg/registry"
)

// ExecutorClient is the executor of a client-executed tool: the server never runs its body; the
// turn parks until the client posts the call's result (extension E6). It is the only executor a
// preset can declare.
const ExecutorClient = "client"

// DeclaredTool is a tool the preset declares itself (tools.declared), registered in the
// preset's scope. It is subject to tools.allow, tools.deny, tools.toolOrder and approval.ask like
// any other tool. Parameters is the JSON Schema of its arguments, passed to the model as written.
// TimeoutMs bounds the wait for the client's result; nil means the server's default tool timeout.
type DeclaredTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Executor    string          `json:"executor"`
	TimeoutMs   *int            `json:"timeoutMs,omitempty"`
}

// declaredName is the rule of a declared tool's name: the characters and length every model
// provider accepts for a function name, so a declared tool never breaks the wire tools.
var declaredName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// declared checks tools.declared: at most MaxDeclaredTools entries, each of executor client with
// a unique name that is not reserved and not a built-in tool's (builtin), an object parameters
// schema of lossless JSON within registry.MaxClientParameters bytes, and a positive timeout.
func (v *validator) declared(tools []DeclaredTool, builtin []string) {
	v.count("tools.declared", len(tools), MaxDeclaredTools)
	seen := map[string]bool{}
	for i, d := range tools {
		field := fmt.Sprintf("tools.declared[%d]", i)
		v.declaredToolName(field+".name", d.Name, seen, builtin)
		seen[d.Name] = true
		v.size(field+".description", d.Description, MaxDeclaredDescriptionBytes)
		if d.Executor != ExecutorClient {
			v.add(field+".executor", `unknown executor %q (want "client")`, echo(d.Executor))
		}
		v.declaredParameters(field+".parameters", d.Parameters)
		if d.TimeoutMs != nil {
			v.between(field+".timeoutMs", *d.TimeoutMs, 1, MaxDeclaredTimeoutMs)
		}
	}
}

// declaredToolName checks one declared tool's name against the names seen before it and the
// built-in tools.
func (v *validator) declaredToolName(field, name string, seen map[string]bool, builtin []string) {
	switch {
	case name == "":
		v.add(field, "is required")
	case name == registry.RunCodeName:
		v.add(field, "%q is reserved", registry.RunCodeName)
	case !declaredName.MatchString(name):
		v.add(field, "tool name %q must be 1 to 64 letters, digits, underscores or hyphens", echo(name))
	case seen[name]:
		v.add(field, "duplicate tool %q", echo(name))
	case slices.Contains(builtin, name):
		v.add(field, "%q is the name of a built-in tool", echo(name))
	}
}

// declaredParameters checks a declared tool's parameters: present, lossless JSON (valid UTF-8),
// at most registry.MaxClientParameters bytes, and a schema of an object (a JSON object whose
// "type" is "object"), which is what function calling passes.
func (v *validator) declaredParameters(field string, raw json.RawMessage) {
	trimmed := bytes.TrimSpace(raw)
	switch {
	case len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")):
		v.add(field, "is required (a JSON Schema with \"type\": \"object\")")
		return
	case len(raw) > registry.MaxClientParameters:
		v.add(field, "must be at most %d bytes (got %d)", registry.MaxClientParameters, len(raw))
		return
	case !utf8.Valid(raw) || !json.Valid(raw):
		v.add(field, "must be lossless JSON")
		return
	}
	var schema map[string]json.RawMessage
	if err := json.Unmarshal(raw, &schema); err != nil {
		v.add(field, "must be a JSON Schema object")
		return
	}
	var typ string
	if err := json.Unmarshal(schema["type"], &typ); err != nil || typ != "object" {
		v.add(field, `must be the schema of an object ("type": "object")`)
	}
}
