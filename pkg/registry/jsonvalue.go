package registry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
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
// arrays as []any, and string, bool, nil.
func decodeValue(raw []byte) (any, error) {
	if !lossless(raw) {
		return nil, fmt.Errorf("value is not lossless JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeNext(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

func decodeNext(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			arr := []any{}
			for dec.More() {
				v, err := decodeNext(dec)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			_, err := dec.Token()
			return arr, err
		}
		obj := &object{vals: map[string]any{}}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k := kt.(string)
			v, err := decodeNext(dec)
			if err != nil {
				return nil, err
			}
			if _, dup := obj.vals[k]; !dup {
				obj.keys = append(obj.keys, k)
			}
			obj.vals[k] = v
		}
		_, err := dec.Token()
		return obj, err
	default:
		return tok, nil
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
