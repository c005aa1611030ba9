package registry

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// Root paths of violation messages: argument violations on the parameters object itself use
// `arguments` and name properties without a prefix (SCH-8); output violations use `value`.
const (
	rootArguments = "arguments"
	rootValue     = "value"
)

// Validate checks a decoded lossless value (see ValidateJSON) against s and returns the SCH-8
// violations in schema-walk order, or nil. Property paths start below root: with
// prefixed=false a top-level property is `name` (arguments), otherwise `root.name` (output).
// Validation never applies defaults (SCH-4).
func (s *Schema) validate(v any, root string, prefixed bool) []string {
	var out []string
	w := walker{root: root, prefixed: prefixed}
	w.walk(s, v, "", &out)
	return out
}

// ValidateJSON decodes raw losslessly and validates it as tool arguments (root `arguments`).
// A raw value that is not lossless JSON yields one violation.
func (s *Schema) ValidateJSON(raw json.RawMessage) []string {
	v, err := decodeValue(raw)
	if err != nil {
		return []string{`"arguments" must be lossless JSON`}
	}
	return s.validate(v, rootArguments, false)
}

type walker struct {
	root     string
	prefixed bool
}

func (w walker) show(path string) string {
	if path == "" {
		return w.root
	}
	return path
}

func (w walker) child(path, key string) string {
	switch {
	case path != "":
		return path + "." + key
	case w.prefixed:
		return w.root + "." + key
	default:
		return key
	}
}

func (w walker) index(path string, i int) string {
	if path == "" {
		path = w.root
	}
	return path + "[" + strconv.Itoa(i) + "]"
}

func (w walker) walk(s *Schema, v any, path string, out *[]string) {
	if len(s.oneOf) > 0 {
		matched := 0
		for _, b := range s.oneOf {
			var scratch []string
			w.walk(b, v, path, &scratch)
			if len(scratch) == 0 {
				matched++
			}
		}
		if matched != 1 {
			*out = append(*out, fmt.Sprintf("%q must match exactly one oneOf branch (matched %d)", w.show(path), matched))
		}
		return
	}
	if s.typ != "" && !typeOK(s.typ, v) {
		*out = append(*out, fmt.Sprintf("%q must be %s", w.show(path), article(s.typ)))
		return
	}
	if n, ok := v.(json.Number); ok && s.typ == "" {
		if _, fine := number(n); !fine {
			*out = append(*out, fmt.Sprintf("%q must be a number", w.show(path)))
			return
		}
	}
	if s.hasConst && !equalValue(s.constVal, v) {
		*out = append(*out, fmt.Sprintf("%q must be %s", w.show(path), s.constJSON))
		return
	}
	if s.enum != nil && !slices.ContainsFunc(s.enum, func(x any) bool { return equalValue(x, v) }) {
		*out = append(*out, fmt.Sprintf("%q must be one of %s", w.show(path), s.enumJSON))
		return
	}
	switch t := v.(type) {
	case *object:
		w.object(s, t, path, out)
	case []any:
		if s.items != nil {
			for i, e := range t {
				w.walk(s.items, e, w.index(path, i), out)
			}
		}
	}
}

func (w walker) object(s *Schema, o *object, path string, out *[]string) {
	for _, name := range s.required {
		if _, ok := o.vals[name]; !ok {
			*out = append(*out, fmt.Sprintf("missing required property %q", w.child(path, name)))
		}
	}
	for _, p := range s.props {
		if v, ok := o.vals[p.name]; ok {
			w.walk(p.schema, v, w.child(path, p.name), out)
		}
	}
	if s.additional != nil && !*s.additional {
		for _, k := range o.keys {
			if s.prop(k) == nil {
				*out = append(*out, fmt.Sprintf("%q is not a declared property (additionalProperties: false)", w.child(path, k)))
			}
		}
	}
}

// typeOK reports whether v has JSON Schema type typ (SCH-7: numbers finite and not -0;
// integers integral).
func typeOK(typ string, v any) bool {
	switch typ {
	case "number", "integer":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		f, fine := number(n)
		if !fine {
			return false
		}
		return typ == "number" || f == math.Trunc(f)
	case "object", "array", "string", "boolean", "null":
		return jsonKind(v) == typ
	}
	return false
}

// validateOutput checks a lossless success value against the tool's compiled output schema
// (SCH-12); nil schema accepts any value. Violations use the root path `value`.
func validateOutput(s *Schema, val []byte) []string {
	if s == nil || (s.typ == "" && len(s.oneOf) == 0 && !s.hasConst && s.enum == nil) {
		return nil
	}
	if s.typ == "string" && s.enum == nil && !s.hasConst && val[0] == '"' {
		return nil
	}
	v, err := decodeValue(val)
	if err != nil {
		return []string{`"value" must be lossless JSON`}
	}
	return s.validate(v, rootValue, true)
}
