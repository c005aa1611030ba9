package registry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Lossless JSON in Go: a value is valid JSON text in valid UTF-8. Decoded values use
// json.Number for numbers (nothing is rounded until a check needs it) and *object for objects,
// which keeps key order so violations are listed deterministically.

// lossless reports whether raw is one valid JSON value in valid UTF-8 (PIPE-2).
func lossless(raw []byte) bool {
	return len(raw) > 0 && utf8.Valid(raw) && json.Valid(raw)
}

// object is a decoded JSON object with its key order.
type object struct {
	keys []string
	vals map[string]any
}

// decodeValue decodes one lossless JSON value: numbers as json.Number, objects as *object,
// arrays as []any, and string, bool, nil. For a duplicated key the last value wins.
func decodeValue(raw []byte) (any, error) {
	if !lossless(raw) {
		return nil, fmt.Errorf("value is not lossless JSON")
	}
	p := parser{b: raw}
	return p.value()
}

// parser reads JSON text that lossless has already accepted, so it checks no syntax.
type parser struct {
	b []byte
	i int
}

func (p *parser) skip() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *parser) value() (any, error) {
	p.skip()
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		return p.str()
	case c == 't':
		p.i += 4
		return true, nil
	case c == 'f':
		p.i += 5
		return false, nil
	case c == 'n':
		p.i += 4
		return nil, nil
	}
	start := p.i
	for p.i < len(p.b) && strings.IndexByte("+-0123456789.eE", p.b[p.i]) >= 0 {
		p.i++
	}
	return json.Number(p.b[start:p.i]), nil
}

func (p *parser) str() (string, error) {
	start := p.i
	p.i++
	escaped := false
	for p.b[p.i] != '"' {
		if p.b[p.i] == '\\' {
			escaped = true
			p.i++
		}
		p.i++
	}
	p.i++
	if !escaped {
		return string(p.b[start+1 : p.i-1]), nil
	}
	var s string
	err := json.Unmarshal(p.b[start:p.i], &s)
	return s, err
}

func (p *parser) object() (any, error) {
	p.i++
	obj := &object{vals: map[string]any{}}
	for {
		p.skip()
		if p.b[p.i] == '}' {
			p.i++
			return obj, nil
		}
		if p.b[p.i] == ',' {
			p.i++
			p.skip()
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		p.skip()
		p.i++ // ':'
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		if _, dup := obj.vals[k]; !dup {
			obj.keys = append(obj.keys, k)
		}
		obj.vals[k] = v
	}
}

func (p *parser) array() (any, error) {
	p.i++
	arr := []any{}
	for {
		p.skip()
		switch p.b[p.i] {
		case ']':
			p.i++
			return arr, nil
		case ',':
			p.i++
		}
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		arr = append(arr, v)
	}
}

// encodeValue writes a decoded value back as compact JSON (used for enum and const messages).
func encodeValue(v any) string {
	var b bytes.Buffer
	writeValue(&b, v)
	return b.String()
}

func writeValue(b *bytes.Buffer, v any) {
	switch t := v.(type) {
	case *object:
		b.WriteByte('{')
		for i, k := range t.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			b.Write(kb)
			b.WriteByte(':')
			writeValue(b, t.vals[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				b.WriteByte(',')
			}
			writeValue(b, e)
		}
		b.WriteByte(']')
	case json.Number:
		b.WriteString(t.String())
	default:
		eb, _ := json.Marshal(t)
		b.Write(eb)
	}
}

// number parses a JSON number and reports whether it is acceptable under SCH-7: finite and not
// negative zero.
func number(n json.Number) (float64, bool) {
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	if f == 0 && math.Signbit(f) {
		return 0, false
	}
	if f == 0 && len(n) > 0 && n[0] == '-' {
		return 0, false
	}
	return f, true
}

// jsonKind names the JSON type of a decoded value as SCH-1 spells types.
func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "boolean"
	case nil:
		return "null"
	case *object:
		return "object"
	case []any:
		return "array"
	}
	return "unknown"
}

// equalValue compares two decoded scalar values (enum and const membership). Numbers compare by
// numeric value, so 1 and 1.0 are equal.
func equalValue(a, b any) bool {
	if an, ok := a.(json.Number); ok {
		bn, ok := b.(json.Number)
		if !ok {
			return false
		}
		af, aok := number(an)
		bf, bok := number(bn)
		return aok && bok && af == bf
	}
	switch at := a.(type) {
	case string, bool, nil:
		return a == b
	default:
		_ = at
		return false
	}
}
