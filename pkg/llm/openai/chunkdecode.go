package openai

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// decodeChunk decodes the data of one streamed event into c without reflection, for the shapes
// providers send: the keys of ChatChunk, ChunkChoice, Delta, ToolCall and FunctionCall spelled
// exactly, strings, integers and null where the types take them, and other keys with any valid
// value (skipped). usage and error are decoded by encoding/json. It reports false when the data is
// anything else (a key in another case, a repeated key, a number that is not a plain integer, a
// string that is not valid UTF-8 or escapes a lone surrogate, trailing data, invalid JSON): the
// caller then decodes it with json.Unmarshal. When it reports true, c holds exactly what
// json.Unmarshal would have decoded into a zero ChatChunk, and json.Unmarshal would not have
// failed (FuzzDecodeChunk).
//
// seen holds the id, object and model of the stream's last chunk, which every chunk repeats: the
// same values are not allocated again.
func decodeChunk(data []byte, c *ChatChunk, seen *chunkStrings) bool {
	d := chunkDecoder{in: data, seen: seen}
	d.ws()
	if !d.chunk(c) {
		return false
	}
	d.ws()
	return d.pos == len(d.in)
}

type chunkDecoder struct {
	in   []byte
	pos  int
	seen *chunkStrings
}

// chunkStrings are the strings a stream's chunks repeat.
type chunkStrings struct{ id, object, model string }

// repeated decodes a string or null into *s (null leaves it), reusing *last when the string is
// spelled the same, and remembering it there when it has no escapes.
func (d *chunkDecoder) repeated(s, last *string) bool {
	if d.null() {
		return true
	}
	if d.pos < len(d.in) && d.in[d.pos] == '"' {
		if end := bytes.IndexByte(d.in[d.pos+1:], '"'); end >= 0 {
			raw := d.in[d.pos+1 : d.pos+1+end]
			if string(raw) == *last && bytes.IndexByte(raw, '\\') < 0 {
				d.pos += end + 2
				*s = *last
				return true
			}
		}
	}
	start := d.pos
	v, ok := d.str()
	*s = v
	if ok && d.pos-start == len(v)+2 {
		*last = v // only a string without escapes: its spelling is then its value, validated
	}
	return ok
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

func (d *chunkDecoder) chunk(c *ChatChunk) bool {
	return d.object(func(key []byte) (uint, bool) {
		switch string(key) {
		case "id":
			return 1 << 0, d.repeated(&c.ID, &d.seen.id)
		case "object":
			return 1 << 1, d.repeated(&c.Object, &d.seen.object)
		case "created":
			if d.null() {
				return 1 << 2, true
			}
			v, ok := d.integer()
			c.Created = v
			return 1 << 2, ok
		case "model":
			return 1 << 3, d.repeated(&c.Model, &d.seen.model)
		case "choices":
			return 1 << 4, d.choices(&c.Choices)
		case "usage":
			return 1 << 5, d.usage(&c.Usage)
		case "error":
			return 1 << 6, d.rawInto(&c.Error)
		}
		return 0, d.skip(key, "id", "object", "created", "model", "choices", "usage", "error")
	})
}

func (d *chunkDecoder) choices(out *[]ChunkChoice) bool {
	if d.null() {
		*out = nil
		return true
	}
	list := make([]ChunkChoice, 0, 1)
	ok := d.array(func() bool {
		var ch ChunkChoice
		if !d.choice(&ch) {
			return false
		}
		list = append(list, ch)
		return true
	})
	*out = list
	return ok
}

func (d *chunkDecoder) choice(ch *ChunkChoice) bool {
	return d.object(func(key []byte) (uint, bool) {
		switch string(key) {
		case "index":
			return 1 << 0, d.intInto(&ch.Index)
		case "delta":
			if d.null() {
				return 1 << 1, true
			}
			return 1 << 1, d.delta(&ch.Delta)
		case "finish_reason":
			return 1 << 2, d.stringPtr(&ch.FinishReason)
		}
		return 0, d.skip(key, "index", "delta", "finish_reason")
	})
}

func (d *chunkDecoder) delta(dl *Delta) bool {
	return d.object(func(key []byte) (uint, bool) {
		switch string(key) {
		case "role":
			return 1 << 0, d.stringInto(&dl.Role)
		case "content":
			return 1 << 1, d.stringPtr(&dl.Content)
		case "reasoning_content":
			return 1 << 2, d.stringPtr(&dl.ReasoningContent)
		case "tool_calls":
			return 1 << 3, d.toolCalls(&dl.ToolCalls)
		}
		return 0, d.skip(key, "role", "content", "reasoning_content", "tool_calls")
	})
}

func (d *chunkDecoder) toolCalls(out *[]ToolCall) bool {
	if d.null() {
		*out = nil
		return true
	}
	list := make([]ToolCall, 0, 1)
	ok := d.array(func() bool {
		var tc ToolCall
		if !d.toolCall(&tc) {
			return false
		}
		list = append(list, tc)
		return true
	})
	*out = list
	return ok
}

func (d *chunkDecoder) toolCall(tc *ToolCall) bool {
	return d.object(func(key []byte) (uint, bool) {
		switch string(key) {
		case "index":
			if d.null() {
				tc.Index = nil
				return 1 << 0, true
			}
			v, ok := d.integer()
			n := int(v)
			tc.Index = &n
			return 1 << 0, ok
		case "id":
			return 1 << 1, d.stringInto(&tc.ID)
		case "type":
			return 1 << 2, d.stringInto(&tc.Type)
		case "function":
			if d.null() {
				return 1 << 3, true
			}
			return 1 << 3, d.function(&tc.Function)
		}
		return 0, d.skip(key, "index", "id", "type", "function")
	})
}

func (d *chunkDecoder) function(f *FunctionCall) bool {
	return d.object(func(key []byte) (uint, bool) {
		switch string(key) {
		case "name":
			return 1 << 0, d.stringInto(&f.Name)
		case "arguments":
			return 1 << 1, d.stringInto(&f.Arguments)
		}
		return 0, d.skip(key, "name", "arguments")
	})
}

func (d *chunkDecoder) usage(out **Usage) bool {
	if d.null() {
		*out = nil
		return true
	}
	u := &Usage{}
	*out = u
	return d.object(func(key []byte) (uint, bool) {
		switch string(key) {
		case "prompt_tokens":
			return 1 << 0, d.intInto(&u.PromptTokens)
		case "completion_tokens":
			return 1 << 1, d.intInto(&u.CompletionTokens)
		case "total_tokens":
			return 1 << 2, d.intInto(&u.TotalTokens)
		case "prompt_cache_hit_tokens":
			return 1 << 3, d.intPtr(&u.PromptCacheHitTokens)
		case "prompt_cache_miss_tokens":
			return 1 << 4, d.intPtr(&u.PromptCacheMissTokens)
		case "prompt_tokens_details":
			if d.null() {
				u.PromptTokensDetails = nil
				return 1 << 5, true
			}
			u.PromptTokensDetails = &PromptTokensDetails{}
			return 1 << 5, d.object(func(key []byte) (uint, bool) {
				if string(key) == "cached_tokens" {
					return 1, d.intInto(&u.PromptTokensDetails.CachedTokens)
				}
				return 0, d.skip(key, "cached_tokens")
			})
		case "completion_tokens_details":
			if d.null() {
				u.CompletionTokensDetails = nil
				return 1 << 6, true
			}
			u.CompletionTokensDetails = &CompletionTokensDetails{}
			return 1 << 6, d.object(func(key []byte) (uint, bool) {
				if string(key) == "reasoning_tokens" {
					return 1, d.intInto(&u.CompletionTokensDetails.ReasoningTokens)
				}
				return 0, d.skip(key, "reasoning_tokens")
			})
		}
		return 0, d.skip(key, "prompt_tokens", "completion_tokens", "total_tokens", "prompt_cache_hit_tokens",
			"prompt_cache_miss_tokens", "prompt_tokens_details", "completion_tokens_details")
	})
}

// intPtr decodes an integer into a new *int, or null into nil.
func (d *chunkDecoder) intPtr(n **int) bool {
	if d.null() {
		*n = nil
		return true
	}
	v, ok := d.integer()
	i := int(v)
	*n = &i
	return ok
}
