package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/dshd/dshd/pkg/eventlog"
)

// TestOpenAPIUpToDate fails when openapi.yaml's generated schemas are not what the generator
// writes from pkg/eventlog now.
func TestOpenAPIUpToDate(t *testing.T) {
	t.Chdir("../..")
	spec, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Regenerate(spec)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != string(spec) {
		t.Fatalf("openapi.yaml's generated event schemas are out of date with pkg/eventlog: run `%s` and commit openapi.yaml", Command)
	}
	again, err := Regenerate(out)
	if err != nil || string(again) != string(out) {
		t.Fatalf("the generator is not deterministic (err %v)", err)
	}
}

// TestEventBranches: the generated Event is a oneOf with one branch per kind with a payload type,
// each a const type and that payload's data, then the two catch-alls.
func TestEventBranches(t *testing.T) {
	t.Chdir("../..")
	block, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	var schemas map[string]map[string]any
	if err := yaml.Unmarshal([]byte(strings.ReplaceAll(block, "\n    ", "\n")[4:]), &schemas); err != nil {
		t.Fatal(err)
	}
	oneOf, _ := schemas["Event"]["oneOf"].([]any)
	payloads := eventlog.Payloads()
	if len(oneOf) != len(payloads)+2 {
		t.Fatalf("Event has %d branches, want %d kinds and 2 catch-alls", len(oneOf), len(payloads))
	}
	for i, p := range payloads {
		ref := oneOf[i].(map[string]any)["$ref"].(string)
		b := schemas[strings.TrimPrefix(ref, "#/components/schemas/")]
		props, _ := b["properties"].(map[string]any)
		typ, _ := props["type"].(map[string]any)
		data, _ := props["data"].(map[string]any)
		if typ["const"] != p.Type() {
			t.Errorf("branch %d (%s): type %v, want const %s", i, ref, typ, p.Type())
		}
		dataRef, _ := data["$ref"].(string)
		if _, ok := schemas[strings.TrimPrefix(dataRef, "#/components/schemas/")]; !ok {
			t.Errorf("branch %s: data %v is not a generated schema", ref, data)
		}
	}
	// The catch-alls exclude the kinds' branches: no kind with a payload is one of the other known
	// kinds or of a family.
	others := map[string]bool{}
	typ, _ := schemas["EventOfOtherKnownKind"]["properties"].(map[string]any)["type"].(map[string]any)
	anyOf, _ := typ["anyOf"].([]any)
	if len(anyOf) != 2 {
		t.Fatalf("EventOfOtherKnownKind's type is %v, want an enum and a pattern", typ)
	}
	for _, k := range anyOf[0].(map[string]any)["enum"].([]any) {
		others[k.(string)] = true
	}
	family := regexp.MustCompile(anyOf[1].(map[string]any)["pattern"].(string))
	for _, p := range payloads {
		if others[p.Type()] || family.MatchString(p.Type()) {
			t.Errorf("%s has a payload branch and is also one of EventOfOtherKnownKind's", p.Type())
		}
	}
	later := schemas["EventOfLaterKind"]
	if req, _ := later["required"].([]any); len(req) != 1 || req[0] != "ignorable" {
		t.Errorf("EventOfLaterKind requires %v, want ignorable", later["required"])
	}
}
