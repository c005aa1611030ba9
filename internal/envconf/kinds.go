package envconf

import (
	"encoding"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// set parses value into the field f of setting s.
func set(s Setting, f reflect.Value, value string, decoders map[reflect.Type]func(string) (any, error)) error {
	if decode, ok := decoders[f.Type()]; ok {
		v, err := decode(value)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		f.Set(reflect.ValueOf(v))
		return nil
	}
	if u, ok := f.Addr().Interface().(encoding.TextUnmarshaler); ok {
		if err := u.UnmarshalText([]byte(value)); err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		return nil
	}
	if f.Type() == reflect.TypeFor[time.Duration]() {
		d, err := parseDuration(s, value)
		f.SetInt(int64(d))
		return err
	}
	switch f.Kind() {
	case reflect.String:
		return setString(s, f, value)
	case reflect.Slice:
		if f.Type().Elem().Kind() == reflect.String {
			list := reflect.MakeSlice(f.Type(), 0, 0)
			for _, item := range SplitList(value) {
				list = reflect.Append(list, reflect.ValueOf(item).Convert(f.Type().Elem()))
			}
			f.Set(list)
			return nil
		}
	case reflect.Bool:
		b, err := parseBool(s.Name, value)
		f.SetBool(b)
		return err
	case reflect.Int, reflect.Int64:
		n, err := parseInt(s, value, f.Type().Bits())
		f.SetInt(n)
		return err
	case reflect.Float64:
		x, err := parseFloat(s, value)
		f.SetFloat(x)
		return err
	}
	return fmt.Errorf("envconf: %s (%s) has a type Load cannot read: %s (give it a Decoder)", s.Name, s.Field, f.Type())
}

// SplitList splits a comma-separated list, trimming its items and dropping the empty ones.
func SplitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func setString(s Setting, f reflect.Value, value string) error {
	if n, ok := s.intTag("minlen"); ok && len(value) < int(n) {
		return fmt.Errorf("%s must be at least %d bytes", s.Name, n)
	}
	if oneof := s.tag.Get("oneof"); oneof != "" {
		choices := strings.Split(oneof, ",")
		found := false
		for _, c := range choices {
			found = found || c == value
		}
		if !found {
			return fmt.Errorf("%s must be %s (got %q)", s.Name, orList(choices), value)
		}
	}
	f.SetString(value)
	return nil
}

// orList writes "a, b or c".
func orList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

func parseBool(name, v string) (bool, error) {
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("%s must be 1 or 0 (got %q)", name, v)
}

// parseDuration reads a positive Go duration, at most the max tag when there is one.
func parseDuration(s Setting, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if maxTag := s.tag.Get("max"); maxTag != "" {
		limit, lerr := time.ParseDuration(maxTag)
		if lerr != nil {
			return 0, fmt.Errorf("envconf: %s: max tag %q is no duration", s.Name, maxTag)
		}
		if err != nil || d <= 0 || d > limit {
			return 0, fmt.Errorf("%s must be a positive Go duration of at most %s", s.Name, maxTag)
		}
		return d, nil
	}
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s must be a positive Go duration such as 15s (got %q)", s.Name, v)
	}
	return d, nil
}

// parseInt reads an integer within the min and max tags; its error says which integers are
// accepted, in the words of the unit and zero tags.
func parseInt(s Setting, v string, bits int) (int64, error) {
	n, err := strconv.ParseInt(v, 10, bits)
	lo, hasMin := s.intTag("min")
	hi, hasMax := s.intTag("max")
	if err == nil && (!hasMin || n >= lo) && (!hasMax || n <= hi) {
		return n, nil
	}
	what := "integer"
	if u := s.tag.Get("unit"); u != "" {
		what = "number of " + u
	}
	z := s.tag.Get("zero")
	switch {
	case hasMax:
		an := "an " + what
		if what != "integer" {
			an = "a " + what
		}
		if z != "" {
			return 0, fmt.Errorf("%s must be %s from %d (%s) to %d", s.Name, an, lo, z, hi)
		}
		return 0, fmt.Errorf("%s must be %s from %d to %d", s.Name, an, lo, hi)
	case hasMin && lo == 1:
		return 0, fmt.Errorf("%s must be a positive %s", s.Name, what)
	case hasMin && lo == 0:
		// "a number of bytes" is never negative; "an integer" needs saying so.
		if what == "integer" {
			what = "non-negative integer"
		}
		if z != "" {
			return 0, fmt.Errorf("%s must be a %s (0: %s)", s.Name, what, z)
		}
		return 0, fmt.Errorf("%s must be a %s", s.Name, what)
	case hasMin:
		return 0, fmt.Errorf("%s must be a %s of at least %d", s.Name, what, lo)
	}
	return 0, fmt.Errorf("%s must be an %s", s.Name, what)
}

// parseFloat reads a finite number within the min and max tags.
func parseFloat(s Setting, v string) (float64, error) {
	x, err := strconv.ParseFloat(v, 64)
	lo, hasMin := s.floatTag("min")
	hi, hasMax := s.floatTag("max")
	if err == nil && !math.IsInf(x, 0) && !math.IsNaN(x) && (!hasMin || x >= lo) && (!hasMax || x <= hi) {
		return x, nil
	}
	what := "number"
	if hasMin && lo == 0 {
		what = "non-negative number"
	}
	if u := s.tag.Get("unit"); u != "" {
		what += " of " + u
	}
	if hasMax {
		what += fmt.Sprintf(" of at most %v", hi)
	}
	if z := s.tag.Get("zero"); z != "" {
		what += ", 0 for " + z
	}
	return 0, fmt.Errorf("%s must be a %s (got %q)", s.Name, what, v)
}

func (s Setting) intTag(key string) (int64, bool) {
	v, ok := s.tag.Lookup(key)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}

func (s Setting) floatTag(key string) (float64, bool) {
	v, ok := s.tag.Lookup(key)
	if !ok {
		return 0, false
	}
	x, err := strconv.ParseFloat(v, 64)
	return x, err == nil
}
