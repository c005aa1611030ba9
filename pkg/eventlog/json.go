package eventlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// maxJSONDepth bounds the nesting of event data, so validation never recurses without limit.
const maxJSONDepth = 512

// losslessJSON validates b as lossless JSON (SES-1) and returns it compacted (insignificant
// whitespace removed, everything else byte for byte) in a new slice. Beyond RFC 8259 syntax it
// refuses what would not survive a round trip through the reference's JSON model unchanged:
//
//   - negative zero in any spelling (-0, -0.0, -0e0, or a negative number that underflows to -0);
//   - numbers that overflow a float64 (the reference would read Infinity);
//   - strings that are not valid UTF-8, and escapes of lone UTF-16 surrogates;
//   - duplicate keys in one object (a reader would silently keep only one).
//
// Integers beyond 2^53 are kept as written: the text is stored exactly, so nothing is lost.
func losslessJSON(b []byte) ([]byte, error) {
	out, err := losslessOwned(b)
	if err == nil && len(out) > 0 && &out[0] == &b[0] {
		out = bytes.Clone(out)
	}
	return out, err
}

// losslessOwned is losslessJSON for bytes the caller gives away: when b is already compact (as
// encoding/json writes it) it is returned itself.
func losslessOwned(b []byte) ([]byte, error) {
	s := jsonScanner{in: b}
	s.ws()
	if err := s.value(0); err != nil {
		return nil, err
	}
	s.ws()
	if s.pos != len(s.in) {
		return nil, s.errf("unexpected data after the top-level value")
	}
	if !s.spaced {
		return b, nil
	}
	// Valid JSON with insignificant whitespace: json.Compact removes exactly that (it escapes
	// nothing).
	var buf bytes.Buffer
	buf.Grow(len(b))
	if err := json.Compact(&buf, b); err != nil {
		return nil, s.errf("%v", err)
	}
	return buf.Bytes(), nil
}

// jsonScanner validates lossless JSON; spaced records whether it skipped any whitespace between
// tokens.
type jsonScanner struct {
	in     []byte
	pos    int
	spaced bool
}

func (s *jsonScanner) errf(format string, args ...any) error {
	return fmt.Errorf("invalid JSON at offset %d: %s", s.pos, fmt.Sprintf(format, args...))
}

func (s *jsonScanner) ws() {
	for s.pos < len(s.in) {
		switch s.in[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
			s.spaced = true
		default:
			return
		}
	}
}

func (s *jsonScanner) value(depth int) error {
	if depth > maxJSONDepth {
		return s.errf("nested deeper than %d", maxJSONDepth)
	}
	if s.pos >= len(s.in) {
		return s.errf("unexpected end of input")
	}
	switch c := s.in[s.pos]; {
	case c == '{':
		return s.object(depth)
	case c == '[':
		return s.array(depth)
	case c == '"':
		_, err := s.str(false)
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if len(s.in)-s.pos >= len(lit) && string(s.in[s.pos:s.pos+len(lit)]) == lit {
				s.pos += len(lit)
				return nil
			}
		}
		return s.errf("unexpected character %q", c)
	}
}

// smallObject is the number of keys an object's duplicate check compares one by one; larger
// objects use a set.
const smallObject = 16

func (s *jsonScanner) object(depth int) error {
	s.pos++
	s.ws()
	if s.pos < len(s.in) && s.in[s.pos] == '}' {
		s.pos++
		return nil
	}
	var small [smallObject][]byte
	keys := small[:0]
	var set map[string]struct{}
	for {
		s.ws()
		if s.pos >= len(s.in) || s.in[s.pos] != '"' {
			return s.errf("object key must be a string")
		}
		k, err := s.str(true)
		if err != nil {
			return err
		}
		if dupKey(keys, set, k) {
			return s.errf("duplicate key %q", k)
		}
		switch {
		case set != nil:
			set[string(k)] = struct{}{}
		case len(keys) < smallObject:
			keys = append(keys, k)
		default:
			set = make(map[string]struct{}, 2*smallObject)
			for _, k := range keys {
				set[string(k)] = struct{}{}
			}
			set[string(k)] = struct{}{}
		}
		s.ws()
		if s.pos >= len(s.in) || s.in[s.pos] != ':' {
			return s.errf("expected ':' after an object key")
		}
		s.pos++
		s.ws()
		if err := s.value(depth + 1); err != nil {
			return err
		}
		s.ws()
		if s.pos >= len(s.in) {
			return s.errf("unterminated object")
		}
		switch s.in[s.pos] {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.errf("expected ',' or '}' in an object")
		}
	}
}

// dupKey reports whether k is among the keys seen so far: keys while they are few, else set.
func dupKey(keys [][]byte, set map[string]struct{}, k []byte) bool {
	if set != nil {
		_, dup := set[string(k)]
		return dup
	}
	for _, o := range keys {
		if bytes.Equal(o, k) {
			return true
		}
	}
	return false
}

func (s *jsonScanner) array(depth int) error {
	s.pos++
	s.ws()
	if s.pos < len(s.in) && s.in[s.pos] == ']' {
		s.pos++
		return nil
	}
	for {
		s.ws()
		if err := s.value(depth + 1); err != nil {
			return err
		}
		s.ws()
		if s.pos >= len(s.in) {
			return s.errf("unterminated array")
		}
		switch s.in[s.pos] {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.errf("expected ',' or ']' in an array")
		}
	}
}

// str scans a string starting at the opening quote and, with decode, returns its decoded value
// (for duplicate-key detection): the input's own bytes when it has no escapes.
func (s *jsonScanner) str(decode bool) ([]byte, error) {
	start := s.pos
	s.pos++
	plain := true
	for s.pos < len(s.in) {
		c := s.in[s.pos]
		switch {
		case c == '"':
			s.pos++
			raw := s.in[start:s.pos]
			if plain || !decode {
				return raw[1 : len(raw)-1], nil
			}
			var v string
			if err := json.Unmarshal(raw, &v); err != nil {
				return nil, s.errf("invalid string")
			}
			return []byte(v), nil
		case c == '\\':
			plain = false
			if err := s.escape(); err != nil {
				return nil, err
			}
		case c < 0x20:
			return nil, s.errf("control character in a string")
		case c < utf8.RuneSelf:
			s.pos++
		default:
			r, size := utf8.DecodeRune(s.in[s.pos:])
			if r == utf8.RuneError && size <= 1 {
				return nil, s.errf("string is not valid UTF-8")
			}
			s.pos += size
		}
	}
	return nil, s.errf("unterminated string")
}

func (s *jsonScanner) escape() error {
	if s.pos+1 >= len(s.in) {
		return s.errf("unterminated escape")
	}
	switch s.in[s.pos+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.pos += 2
		return nil
	case 'u':
		r, err := s.hex4(s.pos + 2)
		if err != nil {
			return err
		}
		s.pos += 6
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if s.pos+1 >= len(s.in) || s.in[s.pos] != '\\' || s.in[s.pos+1] != 'u' {
				return s.errf("lone UTF-16 surrogate escape")
			}
			lo, err := s.hex4(s.pos + 2)
			if err != nil {
				return err
			}
			if lo < 0xDC00 || lo > 0xDFFF {
				return s.errf("lone UTF-16 surrogate escape")
			}
			s.pos += 6
		case r >= 0xDC00 && r <= 0xDFFF:
			return s.errf("lone UTF-16 surrogate escape")
		}
		return nil
	default:
		return s.errf("invalid escape")
	}
}

func (s *jsonScanner) hex4(at int) (rune, error) {
	if at+4 > len(s.in) {
		return 0, s.errf("short \\u escape")
	}
	v, err := strconv.ParseUint(string(s.in[at:at+4]), 16, 32)
	if err != nil {
		return 0, s.errf("invalid \\u escape")
	}
	return rune(v), nil
}

var errNegativeZero = errors.New("negative zero is not lossless JSON")

func (s *jsonScanner) number() error {
	start := s.pos
	if s.in[s.pos] == '-' {
		s.pos++
	}
	digits := func() int {
		n := 0
		for s.pos < len(s.in) && s.in[s.pos] >= '0' && s.in[s.pos] <= '9' {
			s.pos++
			n++
		}
		return n
	}
	intStart := s.pos
	if n := digits(); n == 0 || (n > 1 && s.in[intStart] == '0') {
		return s.errf("invalid number")
	}
	isInt := true
	if s.pos < len(s.in) && s.in[s.pos] == '.' {
		isInt = false
		s.pos++
		if digits() == 0 {
			return s.errf("invalid number")
		}
	}
	if s.pos < len(s.in) && (s.in[s.pos] == 'e' || s.in[s.pos] == 'E') {
		isInt = false
		s.pos++
		if s.pos < len(s.in) && (s.in[s.pos] == '+' || s.in[s.pos] == '-') {
			s.pos++
		}
		if digits() == 0 {
			return s.errf("invalid number")
		}
	}
	lit := s.in[start:s.pos]
	if isInt && lit[0] != '-' && len(lit) < 16 {
		return nil // a small non-negative integer: always exact and finite
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return s.errf("invalid number")
	}
	if math.IsInf(f, 0) {
		return fmt.Errorf("invalid JSON at offset %d: number %s overflows a float64", start, lit)
	}
	if f == 0 && math.Signbit(f) {
		return fmt.Errorf("invalid JSON at offset %d: %w (%s)", start, errNegativeZero, lit)
	}
	return nil
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
