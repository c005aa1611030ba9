package preset

import (
	"strings"
)

// Pointer is the JSON Pointer (RFC 6901) into the request body of the value the problem is
// about: "tools.allow[2]" is "/tools/allow/2", "prompt.variables.tone" is
// "/prompt/variables/tone". The name of a map entry (a prompt variable, a policy's match
// argument) is one token, whatever it holds; when the message cut it ("…"), so is the pointer.
func (p Problem) Pointer() string { return FieldPointer(p.Field) }

// FieldPointer turns a field path of this package's problems (dots between names, [i] after a
// name for an index) into a JSON Pointer.
func FieldPointer(field string) string {
	var tokens []string
	for field != "" {
		if n := len(tokens); n > 0 && (tokens[n-1] == "variables" || tokens[n-1] == "match") {
			tokens = append(tokens, field) // the entry of a map: the rest, dots and all
			break
		}
		seg, rest, _ := strings.Cut(field, ".")
		field = rest
		i := strings.IndexByte(seg, '[')
		if i < 0 {
			tokens = append(tokens, seg)
			continue
		}
		tokens = append(tokens, seg[:i])
		for idx := seg[i:]; idx != ""; {
			e := strings.IndexByte(idx, ']')
			if idx[0] != '[' || e < 0 {
				tokens = append(tokens, idx)
				break
			}
			tokens = append(tokens, idx[1:e])
			idx = idx[e+1:]
		}
	}
	var b strings.Builder
	for _, t := range tokens {
		b.WriteString("/")
		b.WriteString(pointerEscaper.Replace(t))
	}
	return b.String()
}

// pointerEscaper escapes a reference token of a JSON Pointer: "~" is "~0", "/" is "~1".
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")
