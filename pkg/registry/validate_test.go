package registry

import (
	"encoding/json"
	"strings"
	"testing"
)

func mustSchema(t testing.TB, s string) *Schema {
	t.Helper()
	c, err := CompileSchema(json.RawMessage(s))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func checkViolations(t *testing.T, schema string, cases map[string]string) {
	t.Helper()
	s := mustSchema(t, schema)
	for in, want := range cases {
		got := strings.Join(s.ValidateJSON(json.RawMessage(in)), "; ")
		if got != want {
			t.Errorf("%s: got %q want %q", in, got, want)
		}
	}
}

const argsSchema = `{"type":"object","properties":{
 "s":{"type":"string"},
 "color":{"type":"string","enum":["red","green"]},
 "tags":{"type":"array","items":{"type":"string"}},
 "n":{"type":"integer","default":3},
 "x":{"type":"number"},
 "k":{"type":"string","const":"fixed"},
 "o":{"type":"object","properties":{"a":{"type":"boolean"}},"required":["a"],"additionalProperties":false},
 "open":{"type":"object"},
 "list":{"type":"array"},
 "u":{"oneOf":[{"type":"string"},{"type":"integer"}]},
 "nul":{"type":"null"}
}}`

func TestSCH4_NoDefaultsAndContainerChecksOnly(t *testing.T) {
	t.Parallel()
	checkViolations(t, argsSchema, map[string]string{
		`{}`:                          "",
		`{"open":{"any":[1]}}`:        "",
		`{"list":[1,"a",null]}`:       "",
		`{"open":[]}`:                 `"open" must be an object`,
		`{"list":{}}`:                 `"list" must be an array`,
		`"not an object at the root"`: `"arguments" must be an object`,
		`{"nul":null,"n":null}`:       `"n" must be an integer`,
	})
}

func TestSCH5_AdditionalProperties(t *testing.T) {
	t.Parallel()
	checkViolations(t, argsSchema, map[string]string{
		`{"extra":1}`:                  "",
		`{"o":{"a":true,"b":1,"c":2}}`: `"o.b" is not a declared property (additionalProperties: false); "o.c" is not a declared property (additionalProperties: false)`,
	})
	checkViolations(t, `{"type":"object","additionalProperties":false}`, map[string]string{
		`{}`:      "",
		`{"a":1}`: `"a" is not a declared property (additionalProperties: false)`,
	})
}

func TestSCH6_RequiredMissing(t *testing.T) {
	t.Parallel()
	checkViolations(t, `{"type":"object","properties":{"path":{"type":"string"},"o":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":true}},"required":["path"]}`, map[string]string{
		`{}`:                  `missing required property "path"`,
		`{"path":"p","o":{}}`: `missing required property "o.a"`,
		`{"path":null}`:       `"path" must be a string`,
	})
}

func TestSCH7_NumbersFiniteNotNegativeZeroIntegral(t *testing.T) {
	t.Parallel()
	checkViolations(t, argsSchema, map[string]string{
		`{"x":-0}`:    `"x" must be a number`,
		`{"x":-0.0}`:  `"x" must be a number`,
		`{"x":1e999}`: `"x" must be a number`,
		`{"x":0}`:     "",
		`{"n":1.5}`:   `"n" must be an integer`,
		`{"n":2.0}`:   "",
		`{"n":-0}`:    `"n" must be an integer`,
		`{"n":1e300}`: "",
	})
}

func TestSCH8_MessagesAndPaths(t *testing.T) {
	t.Parallel()
	checkViolations(t, argsSchema, map[string]string{
		`{"s":1}`:                    `"s" must be a string`,
		`{"color":"blue"}`:           `"color" must be one of ["red","green"]`,
		`{"tags":["a",2]}`:           `"tags[1]" must be a string`,
		`{"k":"other"}`:              `"k" must be "fixed"`,
		`{"u":true}`:                 `"u" must match exactly one oneOf branch (matched 0)`,
		`{"o":{"a":"yes"}}`:          `"o.a" must be a boolean`,
		`{"s":1,"tags":[2],"x":"a"}`: `"s" must be a string; "tags[0]" must be a string; "x" must be a number`,
	})
	checkViolations(t, `{"type":"object"}`, map[string]string{`[]`: `"arguments" must be an object`})
	checkViolations(t, `{"oneOf":[{"type":"number"},{"type":"integer"}]}`, map[string]string{`1`: `"arguments" must match exactly one oneOf branch (matched 2)`})
	out := mustSchema(t, `{"type":"object","properties":{"a":{"type":"array","items":{"type":"string"}}}}`)
	v, _ := decodeValue([]byte(`{"a":[1]}`))
	if got := out.validate(v, rootValue, true); len(got) != 1 || got[0] != `"value.a[0]" must be a string` {
		t.Fatalf("output paths: %q", got)
	}
}
