package codemode

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
)

// node is a decoded JSON value that keeps object key order: *jobject, []any, string, bool,
// json.Number or nil.
type jobject struct {
	keys []string
	vals map[string]any
}

func (o *jobject) get(k string) (any, bool) {
	v, ok := o.vals[k]
	return v, ok
}

// decodeOrdered decodes raw keeping the order of object keys; nil for invalid JSON.
func decodeOrdered(raw []byte) (any, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeNode(dec)
	if err != nil {
		return nil, false
	}
	return v, true
}

func decodeNode(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	if d == '[' {
		arr := []any{}
		for dec.More() {
			v, err := decodeNode(dec)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err := dec.Token()
		return arr, err
	}
	o := &jobject{vals: map[string]any{}}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := kt.(string)
		v, err := decodeNode(dec)
		if err != nil {
			return nil, err
		}
		if _, dup := o.vals[k]; !dup {
			o.keys = append(o.keys, k)
		}
		o.vals[k] = v
	}
	_, err = dec.Token()
	return o, err
}

// maxTypeDepth bounds the nesting a declaration is rendered to; deeper nodes are `unknown`.
const maxTypeDepth = 16

// tsWriter renders JSON Schema nodes as TypeScript types. Rendering never fails: a node outside
// what it understands is `unknown` (CODE-3).
type tsWriter struct {
	buf bytes.Buffer
}

var identRE = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

// propName is a property or tool name as a TypeScript key: bare when it is an identifier,
// quoted otherwise.
func propName(name string) string {
	if identRE.MatchString(name) {
		return name
	}
	return jsonLiteral(name)
}

func jsonLiteral(v any) string {
	b, err := marshalNoEscape(v)
	if err != nil {
		return "unknown"
	}
	return string(b)
}

// docComment writes description as a one-line doc comment at indent, `*/` escaped.
func (w *tsWriter) docComment(desc string, indent int) {
	d := strings.Join(strings.Fields(desc), " ")
	if d == "" {
		return
	}
	d = strings.ReplaceAll(d, "*/", `*\/`)
	w.line(indent, "/** "+d+" */")
}

func (w *tsWriter) line(indent int, s string) {
	w.buf.WriteString(strings.Repeat("  ", indent))
	w.buf.WriteString(s)
	w.buf.WriteByte('\n')
}

// typeOf renders schema s as a type expression at indent (the indent of the line it starts on).
func (w *tsWriter) typeOf(s any, indent, depth int) string {
	if depth > maxTypeDepth {
		return "unknown"
	}
	if b, ok := s.(bool); ok {
		if b {
			return "JsonValue"
		}
		return "never"
	}
	o, ok := s.(*jobject)
	if !ok {
		return "unknown"
	}
	if c, ok := o.get("const"); ok {
		return literal(c)
	}
	if e, ok := o.get("enum"); ok {
		return enumType(e)
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		if v, ok := o.get(k); ok {
			return w.union(v, indent, depth)
		}
	}
	t, has := o.get("type")
	if !has {
		if known(o) {
			return "JsonValue"
		}
		return "unknown"
	}
	if ts, ok := t.([]any); ok {
		parts := make([]string, 0, len(ts))
		for _, x := range ts {
			parts = append(parts, w.typeNamed(o, x, indent, depth))
		}
		return strings.Join(parts, " | ")
	}
	return w.typeNamed(o, t, indent, depth)
}

// known reports whether an untyped schema has only keywords that mean "any JSON value".
func known(o *jobject) bool {
	for _, k := range o.keys {
		switch k {
		case "description", "title", "default", "examples":
		default:
			return false
		}
	}
	return true
}

func (w *tsWriter) typeNamed(o *jobject, t any, indent, depth int) string {
	switch t {
	case "string":
		return "string"
	case "number", "integer":
		return "number"
	case "boolean":
		return "boolean"
	case "null":
		return "null"
	case "array":
		items, ok := o.get("items")
		if !ok {
			return "JsonValue[]"
		}
		it := w.typeOf(items, indent, depth+1)
		if strings.ContainsAny(it, "|&{") {
			return "Array<" + it + ">"
		}
		return it + "[]"
	case "object":
		return w.object(o, indent, depth)
	}
	return "unknown"
}

func (w *tsWriter) union(v any, indent, depth int) string {
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return "unknown"
	}
	parts := make([]string, 0, len(arr))
	for _, b := range arr {
		t := w.typeOf(b, indent, depth+1)
		if strings.Contains(t, "&") {
			t = "(" + t + ")"
		}
		parts = append(parts, t)
	}
	return strings.Join(parts, " | ")
}

func literal(v any) string {
	switch v.(type) {
	case string, bool, json.Number, nil:
		return jsonLiteral(v)
	}
	return "unknown"
}

func enumType(e any) string {
	arr, ok := e.([]any)
	if !ok || len(arr) == 0 {
		return "unknown"
	}
	parts := make([]string, 0, len(arr))
	for _, v := range arr {
		parts = append(parts, literal(v))
	}
	return strings.Join(parts, " | ")
}

// object renders an object schema: its declared properties in order (optional unless
// required), closed with additionalProperties false, else open (`& Record<string, JsonValue>`).
func (w *tsWriter) object(o *jobject, indent, depth int) string {
	closed := false
	if ap, ok := o.get("additionalProperties"); ok {
		if b, isBool := ap.(bool); isBool && !b {
			closed = true
		}
	}
	props, _ := o.get("properties")
	po, _ := props.(*jobject)
	if po == nil || len(po.keys) == 0 {
		if closed {
			return "Record<string, never>"
		}
		return "Record<string, JsonValue>"
	}
	required := map[string]bool{}
	if r, ok := o.get("required"); ok {
		if arr, ok := r.([]any); ok {
			for _, x := range arr {
				if s, ok := x.(string); ok {
					required[s] = true
				}
			}
		}
	}
	var inner tsWriter
	for _, k := range po.keys {
		p := po.vals[k]
		if d, ok := p.(*jobject); ok {
			if desc, ok := d.vals["description"].(string); ok {
				inner.docComment(desc, indent+1)
			}
		}
		opt := "?"
		if required[k] {
			opt = ""
		}
		inner.line(indent+1, propName(k)+opt+": "+inner.typeOf(p, indent+1, depth+1)+";")
	}
	out := "{\n" + inner.buf.String() + strings.Repeat("  ", indent) + "}"
	if !closed {
		out += " & Record<string, JsonValue>"
	}
	return out
}
