package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// decodeJSON reads exactly one JSON value from the request body into v, refusing a body sent
// as anything but JSON (415), invalid UTF-8, lone surrogate escapes, duplicate object keys,
// unknown fields and trailing data. Its errors are *Error values with readable details, or the
// *http.MaxBytesError of an oversized body (which classify maps to 413).
func decodeJSON(r *http.Request, v any) error {
	if err := jsonContentType(r.Header.Get("Content-Type")); err != nil {
		return err
	}
	body, err := io.ReadAll(r.Body) // bounded by limitBody
	if err != nil {
		return bodyError(err)
	}
	return unmarshalStrict(body, v)
}

// unmarshalStrict is decodeJSON after the body is read: the body's checks, then the decoding.
func unmarshalStrict(body []byte, v any) error {
	if i := invalidUTF8(body); i >= 0 {
		return errorf(CodeInvalidRequest, fmt.Sprintf("the request body is not valid UTF-8 (at byte %d)", i))
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errorf(CodeInvalidRequest, "the request body must hold a single JSON value")
	}
	if i := loneSurrogate(body); i >= 0 {
		return errorf(CodeInvalidRequest, fmt.Sprintf("malformed JSON at byte %d: a \\u escape of a lone UTF-16 surrogate", i))
	}
	if key, where, dup := duplicateKey(body); dup {
		detail := fmt.Sprintf("duplicate key %q", key)
		if where != "" {
			detail += " in " + where
		}
		return errorf(CodeInvalidRequest, detail)
	}
	if hasNUL(reflect.ValueOf(v)) {
		return errorf(CodeInvalidRequest, "strings must not contain NUL characters")
	}
	return nil
}

// jsonContentType accepts a request body's Content-Type: application/json or another
// application/*+json type, in UTF-8; none at all (a bare client) is read as JSON too. Anything else
// is a 415 problem.
func jsonContentType(ct string) error {
	if strings.TrimSpace(ct) == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	switch {
	case err != nil:
		return errorf(CodeUnsupportedMedia, "the Content-Type header is malformed; send the body as application/json")
	case mt != "application/json" && !(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")):
		return errorf(CodeUnsupportedMedia, fmt.Sprintf("the request body must be sent as application/json, not %s", mt))
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return errorf(CodeUnsupportedMedia, fmt.Sprintf("the request body must be UTF-8 (charset=utf-8), not charset=%s", cs))
	}
	return nil
}

// bodyError classifies a failure to read the request body.
func bodyError(err error) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return err
	}
	if isTimeout(err) {
		return errorf(CodeRequestTimeout, "the request body did not arrive in time")
	}
	return errorf(CodeInvalidRequest, "the request body could not be read")
}

// invalidUTF8 returns the offset of the first byte of b that is not valid UTF-8, or -1.
func invalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// loneSurrogate returns the offset of the first \u escape in the (valid) JSON text b that is a
// UTF-16 surrogate without its pair, or -1. encoding/json turns those into U+FFFD silently.
func loneSurrogate(b []byte) int {
	in := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			in = !in
		case in && c == '\\':
			i++
			if i >= len(b) || b[i] != 'u' {
				continue
			}
			r, ok := hex4(b, i+1)
			switch {
			case !ok || r < 0xD800 || r >= 0xE000:
				i += 4
			case r >= 0xDC00:
				return i - 1
			default: // a high surrogate: a low one must follow
				if i+10 < len(b) && b[i+5] == '\\' && b[i+6] == 'u' {
					if lo, ok := hex4(b, i+7); ok && lo >= 0xDC00 && lo < 0xE000 {
						i += 10
						continue
					}
				}
				return i - 1
			}
		}
	}
	return -1
}

// hex4 reads the four hex digits of a \u escape at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// duplicateKey finds the first object key that appears twice in one object of the (valid) JSON
// text b, and where that object is ("" for the top level, else a path like prompt.sections[1]).
// encoding/json keeps the last value silently, so a duplicate could smuggle a second meaning
// past a proxy or a validator that kept the first.
func duplicateKey(b []byte) (key, where string, dup bool) {
	type level struct {
		keys    map[string]struct{} // nil for an array
		wantKey bool
		name    string // the key or index of the value being read in this level
		index   int
	}
	var stack []level
	path := func() string {
		var sb strings.Builder
		for i, l := range stack[:len(stack)-1] {
			if l.keys == nil {
				sb.WriteString("[" + strconv.Itoa(l.index) + "]")
				continue
			}
			if i > 0 {
				sb.WriteByte('.')
			}
			sb.WriteString(l.name)
		}
		return sb.String()
	}
	// done marks the end of a value in the enclosing level.
	done := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].keys != nil {
				stack[n-1].wantKey = true
			} else {
				stack[n-1].index++
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", "", false
		}
		if n := len(stack); n > 0 && stack[n-1].keys != nil && stack[n-1].wantKey {
			if tok == json.Delim('}') {
				stack = stack[:n-1]
				done()
				continue
			}
			k, _ := tok.(string)
			if _, seen := stack[n-1].keys[k]; seen {
				return k, path(), true
			}
			stack[n-1].keys[k] = struct{}{}
			stack[n-1].wantKey, stack[n-1].name = false, k
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, level{keys: map[string]struct{}{}, wantKey: true})
		case json.Delim('['):
			stack = append(stack, level{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			done()
		default:
			done()
		}
	}
}

// hasNUL reports whether any string reachable from v holds a NUL character, which PostgreSQL
// text cannot store.
func hasNUL(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		return !v.IsNil() && hasNUL(v.Elem())
	case reflect.String:
		return strings.IndexByte(v.String(), 0) >= 0
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && hasNUL(v.Field(i)) {
				return true
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 { // []byte, json.RawMessage
			return bytes.Contains(v.Bytes(), []byte(`\u0000`))
		}
		for i := range v.Len() {
			if hasNUL(v.Index(i)) {
				return true
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if hasNUL(it.Key()) || hasNUL(it.Value()) {
				return true
			}
		}
	}
	return false
}

// printable reports whether s is valid UTF-8 without control characters, for header and query
// values that end up in the database or in logs.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

func jsonError(err error) error {
	var (
		tooLarge *http.MaxBytesError
		syntax   *json.SyntaxError
		typeErr  *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &tooLarge):
		return err
	case errors.Is(err, io.EOF):
		return errorf(CodeInvalidRequest, "the request body is empty; want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(CodeInvalidRequest, "malformed JSON: unexpected end of the body")
	case errors.As(err, &syntax):
		return errorf(CodeInvalidRequest, fmt.Sprintf("malformed JSON at byte %d: %s", syntax.Offset, syntax.Error()))
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "the body"
		}
		detail := fmt.Sprintf("%s: must be %s (got %s)", field, jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
		if typeErr.Field == "" {
			return errorf(CodeInvalidRequest, detail)
		}
		return fieldError(bodyPointer(typeErr.Field), detail)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return errorf(CodeInvalidRequest, strings.TrimPrefix(err.Error(), "json: "))
	}
	return errorf(CodeInvalidRequest, "malformed JSON: "+err.Error())
}

// jsonKind names a Go kind the way a JSON client thinks of it.
func jsonKind(kind string) string {
	switch kind {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	}
	return "a " + kind
}

// writeJSON answers with status and v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
