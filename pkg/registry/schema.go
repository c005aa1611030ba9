package registry

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Schema is a compiled JSON Schema of the SCH-1 subset. It is immutable after CompileSchema and
// safe for concurrent use.
type Schema struct {
	typ        string // "" = no type constraint (SCH-2)
	oneOf      []*Schema
	props      []prop // declared order
	required   []string
	additional *bool // nil = absent (open)
	items      *Schema
	enum       []any
	enumJSON   string
	hasConst   bool
	constVal   any
	constJSON  string
}

type prop struct {
	name   string
	schema *Schema
}

var schemaTypes = []string{"object", "array", "string", "number", "integer", "boolean", "null"}

var annotations = []string{"description", "title", "default", "examples"}

// CompileSchema checks raw against the SCH-1 subset and compiles it. A schema outside the subset
// gives a *SchemaError (UNSUPPORTED_SCHEMA) listing every violation; JSON cannot express a
// cycle, so cycles need no check here.
func CompileSchema(raw json.RawMessage) (*Schema, error) {
	v, err := decodeValue(raw)
	if err != nil {
		return nil, &SchemaError{Violations: []string{"schema is not lossless JSON"}}
	}
	var viol []string
	s := compileNode(v, "#", &viol)
	if len(viol) > 0 {
		return nil, &SchemaError{Violations: viol}
	}
	return s, nil
}

func compileNode(v any, at string, viol *[]string) *Schema {
	obj, ok := v.(*object)
	if !ok {
		*viol = append(*viol, fmt.Sprintf("%s: a schema must be a JSON object", at))
		return &Schema{}
	}
	bad := func(format string, args ...any) {
		*viol = append(*viol, at+": "+fmt.Sprintf(format, args...))
	}
	s := &Schema{}
	for _, k := range obj.keys {
		switch {
		case k == "type", k == "oneOf", k == "properties", k == "required",
			k == "additionalProperties", k == "items", k == "enum", k == "const":
		case slices.Contains(annotations, k):
			if hasNegZero(obj.vals[k]) {
				bad("annotation %q must be lossless JSON", k)
			}
		default:
			bad("unsupported keyword %q", k)
		}
	}
	if t, ok := obj.vals["type"]; ok {
		ts, isStr := t.(string)
		switch {
		case !isStr:
			bad("type must be a single string")
		case !slices.Contains(schemaTypes, ts):
			bad("unknown type %q", ts)
		default:
			s.typ = ts
		}
	}
	if o, ok := obj.vals["oneOf"]; ok {
		if _, hasType := obj.vals["type"]; hasType {
			bad("type together with oneOf")
		}
		arr, isArr := o.([]any)
		if !isArr || len(arr) < 2 {
			bad("oneOf must be an array of at least two schemas")
		}
		for i, b := range arr {
			s.oneOf = append(s.oneOf, compileNode(b, fmt.Sprintf("%s/oneOf/%d", at, i), viol))
		}
	}
	compileObject(s, obj, at, bad, viol)
	if it, ok := obj.vals["items"]; ok {
		if s.typ != "array" {
			bad("items is allowed on arrays only")
		}
		s.items = compileNode(it, at+"/items", viol)
	}
	compileScalars(s, obj, bad)
	return s
}

func compileObject(s *Schema, obj *object, at string, bad func(string, ...any), viol *[]string) {
	for _, k := range []string{"properties", "required", "additionalProperties"} {
		if _, ok := obj.vals[k]; ok && s.typ != "object" {
			bad("%s is allowed on objects only", k)
		}
	}
	if p, ok := obj.vals["properties"]; ok {
		po, isObj := p.(*object)
		if !isObj {
			bad("properties must be an object")
		} else {
			for _, name := range po.keys {
				s.props = append(s.props, prop{name, compileNode(po.vals[name], at+"/properties/"+name, viol)})
			}
		}
	}
	if r, ok := obj.vals["required"]; ok {
		arr, isArr := r.([]any)
		if !isArr {
			bad("required must be an array of property names")
		}
		for _, e := range arr {
			name, isStr := e.(string)
			switch {
			case !isStr:
				bad("required must contain strings only")
			case slices.Contains(s.required, name):
				bad("required names %q twice", name)
			case s.prop(name) == nil:
				bad("required names %q, which is not in properties", name)
			default:
				s.required = append(s.required, name)
			}
		}
	}
	if a, ok := obj.vals["additionalProperties"]; ok {
		b, isBool := a.(bool)
		if !isBool {
			bad("additionalProperties must be a boolean")
		} else {
			s.additional = &b
		}
	}
}

func compileScalars(s *Schema, obj *object, bad func(string, ...any)) {
	scalarType := s.typ != "object" && s.typ != "array"
	if e, ok := obj.vals["enum"]; ok {
		arr, isArr := e.([]any)
		switch {
		case !scalarType:
			bad("enum is allowed on scalar types only")
		case !isArr || len(arr) == 0:
			bad("enum must be a non-empty array")
		default:
			for _, x := range arr {
				if !isScalar(x) || (s.typ != "" && !typeOK(s.typ, x)) {
					bad("enum value %s does not match type %q", encodeValue(x), s.typ)
				}
			}
			s.enum, s.enumJSON = arr, encodeValue(arr)
		}
	}
	if c, ok := obj.vals["const"]; ok {
		switch {
		case !scalarType || !isScalar(c):
			bad("const is allowed on scalar types only")
		case s.typ != "" && !typeOK(s.typ, c):
			bad("const %s does not match type %q", encodeValue(c), s.typ)
		default:
			s.hasConst, s.constVal, s.constJSON = true, c, encodeValue(c)
		}
		if s.enum != nil && !slices.ContainsFunc(s.enum, func(x any) bool { return equalValue(x, c) }) {
			bad("const %s is not in enum", encodeValue(c))
		}
	}
}

func (s *Schema) prop(name string) *Schema {
	for i := range s.props {
		if s.props[i].name == name {
			return s.props[i].schema
		}
	}
	return nil
}

func isScalar(v any) bool {
	switch v.(type) {
	case *object, []any:
		return false
	}
	return true
}

func hasNegZero(v any) bool {
	switch t := v.(type) {
	case json.Number:
		_, ok := number(t)
		return !ok
	case []any:
		return slices.ContainsFunc(t, hasNegZero)
	case *object:
		for _, k := range t.keys {
			if hasNegZero(t.vals[k]) {
				return true
			}
		}
	}
	return false
}

// describe returns the schema's type list for messages ("a string").
func article(typ string) string {
	switch typ {
	case "integer", "object", "array":
		return "an " + typ
	case "null":
		return "null"
	}
	return "a " + typ
}
