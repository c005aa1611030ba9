// Package envconf loads a configuration struct from environment variables, driven by the
// struct's tags, and describes its settings (a markdown table, a redacted listing) from the same
// tags. It imports only the standard library.
//
// A field is a setting when it has an env tag; a struct field without one is walked into. The
// tags of a setting:
//
//	env:"NAME[,secret][,raw]"  the variable; secret: its value is never printed (Format, Table);
//	                           raw: the value is taken as it is (not trimmed of spaces)
//	default:"V"                the value used when the variable is unset or blank; without it the
//	                           field keeps what it held before Load (a default computed by the caller)
//	defaultdoc:"TEXT"          the default as the table shows it, when V alone does not say it
//	doc:"TEXT"                 what the setting does, for the table
//	min:"N", max:"N"           bounds of a number or a duration (a duration is always positive)
//	unit:"U"                   what a number counts, for the error message ("bytes")
//	zero:"TEXT"                what 0 means, for the error message ("no limit")
//	minlen:"N"                 the least length in bytes of a non-empty string
//	oneof:"a,b,c"              the values a string may take
//
// In defaultdoc and doc, «x» is rendered as code (`x` in markdown): struct tags cannot hold
// backquotes.
//
// The kinds: string, []string (comma-separated, items trimmed, empty items dropped), bool (1, true,
// yes, on / 0, false, no, off), int, int64, float64, time.Duration, any type whose pointer
// implements encoding.TextUnmarshaler, and any type given a Decoder.
package envconf

import (
	"encoding"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Decoder reads one type of setting from its text; see Decode.
type Decoder struct {
	typ    reflect.Type
	decode func(string) (any, error)
}

// Decode returns the Decoder of type T: Load sets a setting of type T to f(value). A non-nil error
// is reported as "NAME: error".
func Decode[T any](f func(string) (T, error)) Decoder {
	return Decoder{typ: reflect.TypeFor[T](), decode: func(s string) (any, error) { return f(s) }}
}

// Load sets the settings of the struct dst points to from getenv (os.Getenv, or a map in tests).
// It returns the first setting's error, in field order; the error names the variable and never
// quotes the value of a secret.
func Load(getenv func(string) string, dst any, decoders ...Decoder) error {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("envconf: Load needs a pointer to a struct, not %T", dst)
	}
	byType := map[reflect.Type]func(string) (any, error){}
	for _, d := range decoders {
		byType[d.typ] = d.decode
	}
	var err error
	walk(v.Elem(), func(s Setting, f reflect.Value) bool {
		value := getenv(s.Name)
		if !s.Raw {
			value = strings.TrimSpace(value)
		}
		if value == "" {
			if !s.hasDefault {
				return true
			}
			value = s.Default
		}
		err = set(s, f, value, byType)
		return err == nil
	})
	return err
}

// walk calls fn with every setting of the struct v and its field, in field order, until fn
// returns false. Fields without an env tag that are structs are walked into.
func walk(v reflect.Value, fn func(Setting, reflect.Value) bool) bool {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		s, ok := settingOf(sf)
		if !ok {
			if sf.Type.Kind() == reflect.Struct && !isLeaf(sf.Type) {
				if !walk(v.Field(i), fn) {
					return false
				}
			}
			continue
		}
		if !fn(s, v.Field(i)) {
			return false
		}
	}
	return true
}

// isLeaf reports whether a struct type is a value of its own (time.Time, a TextUnmarshaler)
// rather than a group of settings.
func isLeaf(t reflect.Type) bool {
	return t == reflect.TypeFor[time.Time]() || reflect.PointerTo(t).Implements(textUnmarshaler)
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// Setting describes one setting, as its tags give it.
type Setting struct {
	Name       string // the variable
	Field      string // the Go field's name
	Default    string // the default tag
	DefaultDoc string // the defaultdoc tag
	Doc        string // the doc tag
	Secret     bool   // the value is never printed
	Raw        bool   // the value is not trimmed

	hasDefault bool
	tag        reflect.StructTag
}

func settingOf(sf reflect.StructField) (Setting, bool) {
	env, ok := sf.Tag.Lookup("env")
	if !ok || env == "" || env == "-" {
		return Setting{}, false
	}
	name, opts, _ := strings.Cut(env, ",")
	s := Setting{Name: name, Field: sf.Name, tag: sf.Tag}
	for o := range strings.SplitSeq(opts, ",") {
		switch o {
		case "secret":
			s.Secret = true
		case "raw":
			s.Raw = true
		}
	}
	s.Default, s.hasDefault = sf.Tag.Lookup("default")
	return s, true
}

// Settings lists the settings of the struct v (a struct or a pointer to one), in field order.
func Settings(v any) []Setting {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		rv = rv.Elem()
	}
	var out []Setting
	walk(rv, func(s Setting, _ reflect.Value) bool {
		// The documentation is read here, not in settingOf: Load needs none of it.
		s.DefaultDoc, s.Doc = s.tag.Get("defaultdoc"), s.tag.Get("doc")
		out = append(out, s)
		return true
	})
	return out
}

// Format lists the settings of the struct v with their values, "NAME=value" separated by spaces,
// a secret shown only as "[set]" (or nothing when empty). It is meant for String methods and
// logs: nothing it returns holds a secret.
func Format(v any) string {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return "<nil>"
		}
		rv = rv.Elem()
	}
	var b strings.Builder
	walk(rv, func(s Setting, f reflect.Value) bool {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s.Name)
		b.WriteByte('=')
		switch {
		case s.Secret && !f.IsZero():
			b.WriteString("[set]")
		case s.Secret:
		default:
			fmt.Fprintf(&b, "%v", formatValue(f))
		}
		return true
	})
	return b.String()
}

// formatValue is what Format shows of a field: a list joined by commas, a pointer's target.
func formatValue(f reflect.Value) any {
	switch {
	case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String:
		items := make([]string, f.Len())
		for i := range items {
			items[i] = f.Index(i).String()
		}
		return strings.Join(items, ",")
	case f.Kind() == reflect.Pointer && f.IsNil():
		return ""
	}
	return f.Interface()
}
