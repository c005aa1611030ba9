package registry

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/fault"
)

func TestSCH1_SupportedSubset(t *testing.T) {
	t.Parallel()
	ok := []string{
		`{"type":"object","properties":{"a":{"type":"string","description":"d","title":"t","default":"x","examples":["y"]}},"required":["a"],"additionalProperties":false}`,
		`{"type":"array","items":{"type":"integer"}}`,
		`{"oneOf":[{"type":"string"},{"type":"null"}]}`,
		`{"type":"string","enum":["a","b"],"const":"a"}`,
		`{"type":"number","const":1.5}`,
		`{"description":"anything"}`,
	}
	for _, s := range ok {
		if _, err := CompileSchema(json.RawMessage(s)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
}

func TestSCH1_RejectsListingEveryViolation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		schema string
		want   []string
	}{
		{`{"type":["string","null"]}`, []string{"type must be a single string"}},
		{`{"type":"string","format":"date"}`, []string{`unsupported keyword "format"`}},
		{`{"type":"string","oneOf":[{"type":"string"},{"type":"null"}]}`, []string{"type together with oneOf"}},
		{`{"oneOf":[{"type":"string"}]}`, []string{"at least two"}},
		{`{"type":"string","properties":{}}`, []string{"properties is allowed on objects only"}},
		{`{"type":"object","items":{}}`, []string{"items is allowed on arrays only"}},
		{`{"type":"object","properties":{"a":{}},"required":["b"]}`, []string{`required names "b"`}},
		{`{"type":"object","additionalProperties":{}}`, []string{"additionalProperties must be a boolean"}},
		{`{"type":"string","enum":[]}`, []string{"enum must be a non-empty array"}},
		{`{"type":"string","enum":[1]}`, []string{"does not match type"}},
		{`{"type":"object","enum":[{}]}`, []string{"enum is allowed on scalar types only"}},
		{`{"type":"string","enum":["a"],"const":"b"}`, []string{"not in enum"}},
		{`{"type":"string","default":-0}`, []string{"lossless"}},
		{`{"type":"object","properties":{"a":{"type":"nope"},"b":{"minLength":1}}}`, []string{`unknown type "nope"`, `#/properties/b: unsupported keyword "minLength"`}},
	}
	for _, c := range cases {
		_, err := CompileSchema(json.RawMessage(c.schema))
		var se *SchemaError
		if !errors.As(err, &se) {
			t.Errorf("%s: want SchemaError, got %v", c.schema, err)
			continue
		}
		if se.ErrorInfo().Code != fault.CodeUnsupportedSchema || len(se.Violations) != len(c.want) {
			t.Errorf("%s: violations %q", c.schema, se.Violations)
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(se.Violations[i], w) {
				t.Errorf("%s: violation %d %q lacks %q", c.schema, i, se.Violations[i], w)
			}
		}
	}
}

func TestSCH2_AnnotationsOnlyMeansAnyValue(t *testing.T) {
	t.Parallel()
	s, err := CompileSchema(json.RawMessage(`{"description":"any"}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{`1`, `"s"`, `null`, `[1,{}]`, `{"a":true}`} {
		if viol := s.ValidateJSON(json.RawMessage(v)); viol != nil {
			t.Errorf("%s: %v", v, viol)
		}
	}
}
