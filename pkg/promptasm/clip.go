package promptasm

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds of what an error message repeats of its input: a registration's names and texts come
// from presets, and an assembly error is logged and written to the log on every turn.
const (
	// clipBytes bounds one echoed name or value.
	clipBytes = 64
	// listNames bounds the names one message lists.
	listNames = 10
)

// clip returns s for an error message: at most clipBytes bytes, cut at a rune boundary and
// marked with "…" when cut.
func clip(s string) string {
	if len(s) <= clipBytes {
		return s
	}
	cut := clipBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// nameList joins at most listNames names, each clipped and formatted by quote, and says how many
// more there are.
func nameList(names []string, quote func(string) string) string {
	n := min(len(names), listNames)
	parts := make([]string, n, n+1)
	for i := range n {
		parts[i] = quote(clip(names[i]))
	}
	if more := len(names) - n; more > 0 {
		parts = append(parts, "and "+strconv.Itoa(more)+" more")
	}
	return strings.Join(parts, ", ")
}
