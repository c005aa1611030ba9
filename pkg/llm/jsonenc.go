package llm

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// jsonPlain marks the ASCII bytes a JSON string carries as they are; jsonPlainHTML also escapes
// <, > and &.
var jsonPlain, jsonPlainHTML = func() (plain, html [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		plain[c] = c != '"' && c != '\\'
		html[c] = plain[c] && c != '<' && c != '>' && c != '&'
	}
	return plain, html
}()

// AppendJSONString appends s as a JSON string exactly as encoding/json writes it: quotes,
// backslashes and control characters escaped (\b \f \n \r \t in short form, the others as
// \u00XX), U+2028 and U+2029 as \u2028 and \u2029, each byte that is not valid UTF-8 replaced by
// \ufffd, and with escapeHTML (json.Marshal's default) <, > and & as \u003c, \u003e and \u0026.
func AppendJSONString(dst []byte, s string, escapeHTML bool) []byte {
	plain := &jsonPlain
	if escapeHTML {
		plain = &jsonPlainHTML
	}
	dst = append(dst, '"')
	done := 0 // s[:done] is written
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if plain[c] {
				i++
				continue
			}
			dst = append(dst, s[done:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			done = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[done:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[done:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		done = i
	}
	dst = append(dst, s[done:]...)
	return append(dst, '"')
}

// AppendJSON appends the JSON of b, exactly what MarshalJSON returns (strings escaped as
// json.Marshal escapes them, HTML characters included).
func (b Block) AppendJSON(dst []byte) ([]byte, error) {
	str := func(key, v string) {
		dst = append(dst, ',', '"')
		dst = append(dst, key...)
		dst = append(dst, '"', ':')
		dst = AppendJSONString(dst, v, true)
	}
	dst = append(dst, `{"type":`...)
	dst = AppendJSONString(dst, b.Type, true)
	switch b.Type {
	case BlockText:
		str("text", b.Text)
	case BlockReasoning:
		str("text", b.Text)
		if b.Signature != "" {
			str("signature", b.Signature)
		}
	case BlockToolCall:
		str("id", b.ID)
		str("name", b.Name)
		str("arguments", b.Arguments)
	case BlockToolResult:
		str("toolCallId", b.ToolCallID)
		dst = append(dst, `,"content":[`...)
		for i, c := range b.Content {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = c.AppendJSON(dst); err != nil {
				return nil, err
			}
		}
		dst = append(dst, `],"isError":`...)
		dst = strconv.AppendBool(dst, b.IsError)
	case BlockImage:
		str("mediaType", b.MediaType)
		str("data", b.Data)
	default:
		return nil, fmt.Errorf("llm: unknown content block type %q", b.Type)
	}
	return append(dst, '}'), nil
}
