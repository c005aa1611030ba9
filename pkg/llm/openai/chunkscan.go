package openai

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// chunkDecoder scans the JSON of a streamed chunk for decodeChunk: every method consumes one
// value (or reports false, leaving the decoder to be dropped) and accepts only what
// encoding/json accepts, decoding it the same way.
type chunkDecoder struct {
	in   []byte
	pos  int
	seen *chunkStrings
}

// maxSkipDepth bounds the nesting of a skipped value; deeper ones are left to encoding/json.
const maxSkipDepth = 64

func (d *chunkDecoder) ws() {
	for d.pos < len(d.in) {
		switch d.in[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// next returns the next byte after whitespace without consuming it, 0 at the end.
func (d *chunkDecoder) next() byte {
	d.ws()
	if d.pos >= len(d.in) {
		return 0
	}
	return d.in[d.pos]
}

// object decodes an object, calling field for every key with the decoder at its value; field
// decodes the value and returns false to give up. seen detects repeated known keys: field
// returns the bit of a known key (0 for a skipped one).
func (d *chunkDecoder) object(field func(key []byte) (bit uint, ok bool)) bool {
	if d.next() != '{' {
		return false
	}
	d.pos++
	if d.next() == '}' {
		d.pos++
		return true
	}
	var seen uint
	for {
		if d.next() != '"' {
			return false
		}
		key, ok := d.rawKey()
		if !ok || d.next() != ':' {
			return false
		}
		d.pos++
		d.ws()
		bit, ok := field(key)
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		switch d.next() {
		case ',':
			d.pos++
		case '}':
			d.pos++
			return true
		default:
			return false
		}
	}
}

// rawKey returns an object key without escapes and of ASCII only (anything else is left to
// encoding/json, whose key matching folds case).
func (d *chunkDecoder) rawKey() ([]byte, bool) {
	start := d.pos + 1
	for i := start; i < len(d.in); i++ {
		switch c := d.in[i]; {
		case c == '"':
			d.pos = i + 1
			return d.in[start:i], true
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return nil, false
		}
	}
	return nil, false
}

// skip validates and skips an unknown key's value. A key that encoding/json would match to a
// field in another case is refused.
func (d *chunkDecoder) skip(key []byte, known ...string) bool {
	for _, k := range known {
		if strings.EqualFold(string(key), k) {
			return false
		}
	}
	return d.skipValue(0)
}

func (d *chunkDecoder) skipValue(depth int) bool {
	if depth > maxSkipDepth {
		return false
	}
	switch c := d.next(); {
	case c == '{':
		return d.object(func([]byte) (uint, bool) { return 0, d.skipValue(depth + 1) })
	case c == '[':
		return d.array(func() bool { return d.skipValue(depth + 1) })
	case c == '"':
		_, ok := d.str()
		return ok
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if strings.HasPrefix(string(d.in[d.pos:min(d.pos+5, len(d.in))]), lit) {
				d.pos += len(lit)
				return true
			}
		}
		return false
	}
}

// array decodes an array, calling elem with the decoder at each element.
func (d *chunkDecoder) array(elem func() bool) bool {
	if d.next() != '[' {
		return false
	}
	d.pos++
	if d.next() == ']' {
		d.pos++
		return true
	}
	for {
		if !elem() {
			return false
		}
		switch d.next() {
		case ',':
			d.pos++
		case ']':
			d.pos++
			return true
		default:
			return false
		}
	}
}

// null consumes a null literal if one is next.
func (d *chunkDecoder) null() bool {
	if d.next() == 'n' && len(d.in)-d.pos >= 4 && string(d.in[d.pos:d.pos+4]) == "null" {
		d.pos += 4
		return true
	}
	return false
}

// number validates and skips a JSON number.
func (d *chunkDecoder) number() bool {
	if d.pos < len(d.in) && d.in[d.pos] == '-' {
		d.pos++
	}
	first := d.pos
	if n := d.digits(); n == 0 || (n > 1 && d.in[first] == '0') {
		return false
	}
	if d.pos < len(d.in) && d.in[d.pos] == '.' {
		d.pos++
		if d.digits() == 0 {
			return false
		}
	}
	if d.pos < len(d.in) && (d.in[d.pos] == 'e' || d.in[d.pos] == 'E') {
		d.pos++
		if d.pos < len(d.in) && (d.in[d.pos] == '+' || d.in[d.pos] == '-') {
			d.pos++
		}
		if d.digits() == 0 {
			return false
		}
	}
	return true
}

// digits skips a run of digits and returns its length.
func (d *chunkDecoder) digits() int {
	start := d.pos
	for d.pos < len(d.in) && d.in[d.pos] >= '0' && d.in[d.pos] <= '9' {
		d.pos++
	}
	return d.pos - start
}

// integer decodes a plain integer (no fraction or exponent, at most 18 digits) as encoding/json
// decodes it into an int or int64.
func (d *chunkDecoder) integer() (int64, bool) {
	start := d.pos
	if d.next() == '-' {
		d.pos++
	}
	first := d.pos
	n := d.digits()
	if n == 0 || n > 18 || (n > 1 && d.in[first] == '0') {
		return 0, false
	}
	if d.pos < len(d.in) {
		switch d.in[d.pos] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	v, err := strconv.ParseInt(string(d.in[start:d.pos]), 10, 64)
	return v, err == nil
}

// str decodes a string value: valid UTF-8, standard escapes, \u escapes of BMP characters and of
// surrogate pairs.
func (d *chunkDecoder) str() (string, bool) {
	if d.pos >= len(d.in) || d.in[d.pos] != '"' {
		return "", false
	}
	start := d.pos + 1
	i := start
	for i < len(d.in) {
		c := d.in[i]
		switch {
		case c == '"':
			d.pos = i + 1
			return string(d.in[start:i]), true
		case c == '\\':
			return d.escaped(start, i)
		case c < 0x20:
			return "", false
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(d.in[i:])
			if r == utf8.RuneError && size <= 1 {
				return "", false
			}
			i += size
		}
	}
	return "", false
}

// escaped decodes the rest of a string from its first escape at i.
func (d *chunkDecoder) escaped(start, i int) (string, bool) {
	buf := make([]byte, 0, len(d.in)-start)
	buf = append(buf, d.in[start:i]...)
	for i < len(d.in) {
		c := d.in[i]
		switch {
		case c == '"':
			d.pos = i + 1
			return string(buf), true
		case c == '\\':
			if i+1 >= len(d.in) {
				return "", false
			}
			i += 2
			switch d.in[i-1] {
			case '"', '\\', '/':
				buf = append(buf, d.in[i-1])
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, ok := hex4(d.in, i)
				if !ok {
					return "", false
				}
				i += 4
				if utf16.IsSurrogate(r) {
					if i+1 >= len(d.in) || d.in[i] != '\\' || d.in[i+1] != 'u' {
						return "", false
					}
					lo, ok := hex4(d.in, i+2)
					if r = utf16.DecodeRune(r, lo); !ok || r == utf8.RuneError {
						return "", false
					}
					i += 6
				}
				buf = utf8.AppendRune(buf, r)
			default:
				return "", false
			}
		case c < 0x20:
			return "", false
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			i++
		default:
			r, size := utf8.DecodeRune(d.in[i:])
			if r == utf8.RuneError && size <= 1 {
				return "", false
			}
			buf = append(buf, d.in[i:i+size]...)
			i += size
		}
	}
	return "", false
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// stringInto decodes a string or null (which leaves *s as it is) into s.
func (d *chunkDecoder) stringInto(s *string) bool {
	if d.null() {
		return true
	}
	v, ok := d.str()
	*s = v
	return ok
}

// stringPtr decodes a string into a new *string, or null into nil.
func (d *chunkDecoder) stringPtr(s **string) bool {
	if d.null() {
		*s = nil
		return true
	}
	v, ok := d.str()
	*s = &v
	return ok
}

// intInto decodes an integer or null (which leaves *n as it is) into n.
func (d *chunkDecoder) intInto(n *int) bool {
	if d.null() {
		return true
	}
	v, ok := d.integer()
	*n = int(v)
	return ok
}

// rawInto hands a value (validated, then decoded by encoding/json) to v.
func (d *chunkDecoder) rawInto(v any) bool {
	start := d.pos
	if !d.skipValue(0) {
		return false
	}
	return json.Unmarshal(d.in[start:d.pos], v) == nil
}
