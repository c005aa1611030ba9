package envconf

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"time"
)

// Check reports the tags of the struct v (a struct or a pointer to one) that Load would misread:
// a bound that is no number (or, for a duration, no duration) or on a kind without bounds, a
// minlen or oneof on a non-string, a default that is not a valid value, a name read twice. A
// test of the configuration calls it; Load itself ignores a malformed bound.
func Check(v any, decoders ...Decoder) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		rv = rv.Elem()
	}
	byType := map[reflect.Type]func(string) (any, error){}
	for _, d := range decoders {
		byType[d.typ] = d.decode
	}
	var errs []error
	seen := map[string]bool{}
	walk(rv, func(s Setting, f reflect.Value) bool {
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("%s is read by two fields", s.Name))
		}
		seen[s.Name] = true
		if err := checkTags(s, f.Type()); err != nil {
			errs = append(errs, err)
		}
		if s.hasDefault {
			scratch := reflect.New(f.Type()).Elem()
			if err := set(s, scratch, s.Default, byType); err != nil {
				errs = append(errs, fmt.Errorf("%s (%s): default %q: %w", s.Name, s.Field, s.Default, err))
			}
		}
		return true
	})
	return errors.Join(errs...)
}

// checkTags checks the bound and string tags of a setting against its field's type.
func checkTags(s Setting, t reflect.Type) error {
	isDuration := t == reflect.TypeFor[time.Duration]()
	for _, key := range []string{"min", "max"} {
		v, ok := s.tag.Lookup(key)
		if !ok {
			continue
		}
		var err error
		switch {
		case isDuration && key == "max":
			_, err = time.ParseDuration(v)
		case isDuration:
			err = errors.New("a duration takes only max (it is always positive)")
		case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
			_, err = strconv.ParseInt(v, 10, t.Bits())
		case t.Kind() == reflect.Float64:
			_, err = strconv.ParseFloat(v, 64)
		default:
			err = fmt.Errorf("a %s takes no bounds", t)
		}
		if err != nil {
			return fmt.Errorf("%s (%s): tag %s:%q: %w", s.Name, s.Field, key, v, err)
		}
	}
	for _, key := range []string{"minlen", "oneof"} {
		if v, ok := s.tag.Lookup(key); ok {
			if t.Kind() != reflect.String {
				return fmt.Errorf("%s (%s): tag %s on a %s (strings only)", s.Name, s.Field, key, t)
			}
			if _, err := strconv.Atoi(v); key == "minlen" && err != nil {
				return fmt.Errorf("%s (%s): tag minlen:%q is no integer", s.Name, s.Field, v)
			}
		}
	}
	return nil
}
