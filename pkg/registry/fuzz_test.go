package registry

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

const fuzzSchema = `{"type":"object","properties":{
 "s":{"type":"string","enum":["a","b"]},
 "n":{"type":"integer"},
 "x":{"type":"number","const":1.5},
 "o":{"type":"object","properties":{"k":{"type":"array","items":{"type":"boolean"}}},"required":["k"],"additionalProperties":false},
 "u":{"oneOf":[{"type":"string"},{"type":"null"}]}
},"required":["s"]}`

// FuzzValidate checks that argument validation never panics and that every violation follows
// an SCH-8 template. The committed corpus is under testdata/fuzz/FuzzValidate.
func FuzzValidate(f *testing.F) {
	for _, seed := range []string{`{"s":"a"}`, `{}`, `{"n":-0}`, `{"o":{"k":[true,1]},"z":1}`, `[1,2]`, `"x"`, `{"u":1}`, `1e999`} {
		f.Add([]byte(seed))
	}
	s := mustSchema(f, fuzzSchema)
	f.Fuzz(func(t *testing.T, data []byte) {
		viol := s.ValidateJSON(json.RawMessage(data))
		for _, v := range viol {
			if !strings.HasPrefix(v, "missing required property \"") && !strings.HasPrefix(v, `"`) {
				t.Fatalf("violation outside the templates: %q", v)
			}
		}
		if lossless(data) {
			checkDecodeAgainstStdlib(t, data)
			if _, err := CompileSchema(json.RawMessage(data)); err != nil {
				if se, ok := err.(*SchemaError); !ok || len(se.Violations) == 0 {
					t.Fatalf("compile error without violations: %v", err)
				}
			}
		}
	})
}

// checkDecodeAgainstStdlib compares the hand-written parser with encoding/json (UseNumber).
func checkDecodeAgainstStdlib(t *testing.T, data []byte) {
	got, err := decodeValue(data)
	if err != nil {
		t.Fatalf("decode %q: %v", data, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var want any
	if err := dec.Decode(&want); err != nil {
		t.Fatalf("stdlib decode %q: %v", data, err)
	}
	a, _ := json.Marshal(plain(got))
	b, _ := json.Marshal(want)
	if !bytes.Equal(a, b) {
		t.Fatalf("decode %q: got %s want %s", data, a, b)
	}
}

// plain converts *object into map[string]any, recursively.
func plain(v any) any {
	switch t := v.(type) {
	case *object:
		m := map[string]any{}
		for k, x := range t.vals {
			m[k] = plain(x)
		}
		return m
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = plain(x)
		}
		return out
	}
	return v
}
