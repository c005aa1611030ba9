package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"
)

// decodeJSON reads exactly one JSON value from the request body into v, refusing unknown fields
// and trailing data. Its errors are *Error values with readable details, or the
// *http.MaxBytesError of an oversized body (which classify maps to 413).
func decodeJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return err
		}
		return errorf(CodeInvalidRequest, "the request body must hold a single JSON value")
	}
	if hasNUL(reflect.ValueOf(v)) {
		return errorf(CodeInvalidRequest, "strings must not contain NUL characters")
	}
	return nil
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
		return errorf(CodeInvalidRequest, fmt.Sprintf("%s: must be %s (got %s)", field, jsonKind(typeErr.Type.Kind().String()), typeErr.Value))
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
