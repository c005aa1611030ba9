package api_test

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// schemaValidator checks decoded JSON values against the JSON Schema subset openapi.yaml uses:
// $ref, type (also a list, for null), enum, const, properties, required, additionalProperties,
// items, allOf, anyOf, oneOf, not, minimum, maximum, minLength, maxLength, pattern, and the uuid
// and date-time formats.
type schemaValidator struct {
	spec map[string]any // the whole OpenAPI document, for $ref
}

// validate returns one message per violation of schema by v, at path.
func (sv schemaValidator) validate(schema any, v any, path string) []string {
	s, ok := schema.(map[string]any)
	if !ok {
		return []string{path + ": schema is not an object"}
	}
	if ref, ok := s["$ref"].(string); ok {
		return sv.validate(sv.resolve(ref), v, path)
	}
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, path+": "+fmt.Sprintf(format, args...)) }
	if t, ok := s["type"]; ok && !typeMatches(t, v) {
		fail("%v is not of type %v", short(v), t)
		return errs
	}
	if enum, ok := s["enum"].([]any); ok && !slices.ContainsFunc(enum, func(e any) bool { return fmt.Sprint(e) == fmt.Sprint(v) }) {
		fail("%v is not one of %v", short(v), enum)
	}
	if c, ok := s["const"]; ok && fmt.Sprint(c) != fmt.Sprint(v) {
		fail("%v is not %v", short(v), c)
	}
	for _, sub := range list(s["allOf"]) {
		errs = append(errs, sv.validate(sub, v, path)...)
	}
	if anyOf := list(s["anyOf"]); len(anyOf) > 0 && !slices.ContainsFunc(anyOf, func(sub any) bool { return len(sv.validate(sub, v, path)) == 0 }) {
		fail("%v matches none of the anyOf schemas", short(v))
	}
	if not, ok := s["not"]; ok && len(sv.validate(not, v, path)) == 0 {
		fail("%v matches the schema of not", short(v))
	}
	if one := list(s["oneOf"]); len(one) > 0 {
		matched := 0
		var closest []string // the errors of the branch v misses least, to say why it matches none
		for _, sub := range one {
			e := sv.validate(sub, v, path)
			if len(e) == 0 {
				matched++
			} else if closest == nil || len(e) < len(closest) {
				closest = e
			}
		}
		if matched != 1 {
			fail("%v matches %d of the oneOf schemas, want 1", short(v), matched)
		}
		if matched == 0 {
			errs = append(errs, closest...)
		}
	}
	switch x := v.(type) {
	case map[string]any:
		errs = append(errs, sv.object(s, x, path)...)
	case []any:
		if items, ok := s["items"]; ok {
			for i, e := range x {
				errs = append(errs, sv.validate(items, e, fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
	case string:
		errs = append(errs, stringChecks(s, x, path)...)
	case float64:
		if min, ok := number(s["minimum"]); ok && x < min {
			fail("%v < minimum %v", x, min)
		}
		if max, ok := number(s["maximum"]); ok && x > max {
			fail("%v > maximum %v", x, max)
		}
	}
	return errs
}

func (sv schemaValidator) object(s map[string]any, x map[string]any, path string) []string {
	var errs []string
	props, _ := s["properties"].(map[string]any)
	for _, r := range list(s["required"]) {
		if _, ok := x[r.(string)]; !ok {
			errs = append(errs, fmt.Sprintf("%s: required property %q is missing", path, r))
		}
	}
	for k, val := range x {
		if ps, ok := props[k]; ok {
			errs = append(errs, sv.validate(ps, val, path+"."+k)...)
			continue
		}
		switch ap := s["additionalProperties"].(type) {
		case bool:
			if !ap {
				errs = append(errs, fmt.Sprintf("%s: property %q is not in the schema", path, k))
			}
		case map[string]any:
			errs = append(errs, sv.validate(ap, val, path+"."+k)...)
		}
	}
	return errs
}

func stringChecks(s map[string]any, x, path string) []string {
	var errs []string
	if n, ok := number(s["minLength"]); ok && float64(len(x)) < n {
		errs = append(errs, fmt.Sprintf("%s: %q is shorter than %v", path, x, n))
	}
	if n, ok := number(s["maxLength"]); ok && float64(len(x)) > n {
		errs = append(errs, fmt.Sprintf("%s: %q is longer than %v", path, x, n))
	}
	if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(x) {
		errs = append(errs, fmt.Sprintf("%s: %q does not match %s", path, short(x), p))
	}
	switch s["format"] {
	case "uuid":
		if _, err := uuid.Parse(x); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %q is not a uuid", path, x))
		}
	case "date-time":
		if _, err := time.Parse(time.RFC3339Nano, x); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %q is not a date-time", path, x))
		}
	}
	return errs
}

// resolve follows a local reference such as #/components/schemas/Preset.
func (sv schemaValidator) resolve(ref string) any {
	var cur any = sv.spec
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		m, _ := cur.(map[string]any)
		cur = m[part]
	}
	return cur
}

func typeMatches(t any, v any) bool {
	for _, name := range append(list(t), t) {
		switch name {
		case "object":
			if _, ok := v.(map[string]any); ok {
				return true
			}
		case "array":
			if _, ok := v.([]any); ok {
				return true
			}
		case "string":
			if _, ok := v.(string); ok {
				return true
			}
		case "boolean":
			if _, ok := v.(bool); ok {
				return true
			}
		case "number":
			if _, ok := v.(float64); ok {
				return true
			}
		case "integer":
			if f, ok := v.(float64); ok && f == math.Trunc(f) {
				return true
			}
		case "null":
			if v == nil {
				return true
			}
		}
	}
	return false
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

func short(v any) string {
	s := fmt.Sprint(v)
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}
