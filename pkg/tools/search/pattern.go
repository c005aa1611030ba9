package search

import (
	"path"
	"strings"
)

// pattern is a glob: `*`, `?` and `[...]` within one path element (path.Match), `**` for any
// number of elements, `{a,b}` alternatives. A pattern without `/` matches the base name at any
// depth (as in .gitignore); one with `/` matches the path relative to the search directory.
type pattern struct {
	alts [][]string // per brace alternative, the elements
}

// Pattern limits: alternatives after brace expansion, and `**` elements.
const (
	maxAlternatives = 64
	maxDoubleStars  = 4
)

// compileGlob parses a glob; the error says what is wrong with it. An anchored glob matches
// whole paths even without a `/`.
func compileGlob(s string, anchored bool) (*pattern, string) {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "./"), "/")
	if s == "" {
		return nil, "the pattern is empty"
	}
	if !strings.Contains(s, "/") && !anchored {
		s = "**/" + s
	}
	exp, ok := expandBraces(s)
	if !ok {
		return nil, "unbalanced or too many {} alternatives"
	}
	p := &pattern{}
	for _, e := range exp {
		elems := strings.Split(e, "/")
		stars := 0
		for _, el := range elems {
			if el == "**" {
				stars++
				continue
			}
			if _, err := path.Match(el, ""); err != nil {
				return nil, "invalid element " + quote(el)
			}
		}
		if stars > maxDoubleStars {
			return nil, "too many ** elements"
		}
		p.alts = append(p.alts, elems)
	}
	return p, ""
}

func quote(s string) string { return `"` + s + `"` }

// match reports whether the slash-separated relative path p matches.
func (pt *pattern) match(p string) bool {
	elems := strings.Split(p, "/")
	for _, alt := range pt.alts {
		if matchElems(alt, elems) {
			return true
		}
	}
	return false
}

func matchElems(pat, elems []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			rest := pat[1:]
			for i := 0; i <= len(elems); i++ {
				if matchElems(rest, elems[i:]) {
					return true
				}
			}
			return false
		}
		if len(elems) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], elems[0]); !ok {
			return false
		}
		pat, elems = pat[1:], elems[1:]
	}
	return len(elems) == 0
}

// expandBraces expands {a,b} groups (not nested), at most maxAlternatives results.
func expandBraces(s string) ([]string, bool) {
	open := strings.IndexByte(s, '{')
	if open < 0 {
		if strings.IndexByte(s, '}') >= 0 {
			return nil, false
		}
		return []string{s}, true
	}
	end := strings.IndexByte(s[open:], '}')
	if end < 0 || strings.IndexByte(s[:open], '}') >= 0 {
		return nil, false
	}
	end += open
	inner := s[open+1 : end]
	if strings.IndexByte(inner, '{') >= 0 {
		return nil, false
	}
	rest, ok := expandBraces(s[end+1:])
	if !ok {
		return nil, false
	}
	var out []string
	for _, alt := range strings.Split(inner, ",") {
		for _, r := range rest {
			out = append(out, s[:open]+alt+r)
			if len(out) > maxAlternatives {
				return nil, false
			}
		}
	}
	return out, true
}
