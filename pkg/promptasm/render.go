package promptasm

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// render interpolates and joins an assembly (PRM-7) and builds its runtime-context snapshot
// (PRM-9).
func render(a Assembly) (Result, error) {
	sections, err := renderAll("section", a.Sections, a.Variables)
	if err != nil {
		return Result{}, err
	}
	contexts, err := renderAll("context", a.Contexts, a.Variables)
	if err != nil {
		return Result{}, err
	}
	return Result{
		System:         joinTexts(sections),
		Sections:       sections,
		Tools:          a.Tools,
		RuntimeContext: newSnapshot(contexts),
	}, nil
}

// renderAll interpolates each piece and drops the ones that render empty.
func renderAll(kind string, pieces []SectionText, vars map[string]Value) ([]SectionText, error) {
	out := make([]SectionText, 0, len(pieces))
	for _, p := range pieces {
		text, err := interpolate(p.Text, vars)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", kind, clip(p.Name), err)
		}
		if text != "" {
			out = append(out, SectionText{Name: p.Name, Order: p.Order, Text: text})
		}
	}
	return out, nil
}

func joinTexts(pieces []SectionText) string {
	texts := make([]string, len(pieces))
	for i, p := range pieces {
		texts[i] = p.Text
	}
	return strings.Join(texts, "\n\n")
}

// interpolate replaces every {{name}} group in text with its variable's value (PRM-7). A group
// is "{{", a name without braces, "}}". It fails on a group whose name does not match
// [a-z][a-z0-9_]*, on an unknown name, on a name without a value, and on a "{{" that does not
// start a group while a "}}" follows it somewhere. A "{{" with no "}}" after it is literal.
// Substituted values are not scanned again.
func interpolate(text string, vars map[string]Value) (string, error) {
	open := strings.Index(text, "{{")
	if open < 0 {
		return text, nil
	}
	var b strings.Builder
	last := 0
	for ; open >= 0; open = nextOpen(text, last) {
		name, end, ok := groupAt(text, open)
		if !ok {
			if strings.Contains(text[open+2:], "}}") {
				return "", fmt.Errorf("%w at %q (a reference is {{name}}, name matching [a-z][a-z0-9_]*)",
					ErrMalformedReference, excerpt(text[open:]))
			}
			b.WriteString(text[last : open+2])
			last = open + 2
			continue
		}
		if !validVariableName(name) {
			return "", fmt.Errorf("%w %q (names match [a-z][a-z0-9_]*)", ErrMalformedReference, "{{"+clip(name)+"}}")
		}
		v, known := vars[name]
		switch {
		case !known:
			return "", fmt.Errorf("%w %q; registered variables: %s", ErrUnknownVariable, "{{"+clip(name)+"}}", variableList(vars))
		case v.Absent:
			return "", fmt.Errorf("%w: %q has no value in this assembly", ErrNoValue, "{{"+clip(name)+"}}")
		}
		b.WriteString(text[last:open])
		b.WriteString(v.Text)
		last = end
	}
	b.WriteString(text[last:])
	return b.String(), nil
}

func nextOpen(text string, from int) int {
	i := strings.Index(text[from:], "{{")
	if i < 0 {
		return -1
	}
	return from + i
}

// groupAt reports whether a group starts at text[open:] ("{{" known to be there), returning its
// name and the index just past its "}}".
func groupAt(text string, open int) (name string, end int, ok bool) {
	i := open + 2
	for i < len(text) && text[i] != '{' && text[i] != '}' {
		i++
	}
	if i+1 < len(text) && text[i] == '}' && text[i+1] == '}' {
		return text[open+2 : i], i + 2, true
	}
	return "", 0, false
}

// excerpt returns the start of s for an error message, cut at a rune boundary.
func excerpt(s string) string {
	const limit = 16
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func variableList(vars map[string]Value) string {
	if len(vars) == 0 {
		return "(none)"
	}
	names := make([]string, 0, len(vars))
	for name := range vars {
		names = append(names, name)
	}
	slices.Sort(names)
	return nameList(names, func(s string) string { return s })
}
