package promptasm

import "unicode/utf8"

// Bounds of what an error message repeats of its input: a registration's names and texts come
// from presets, and an assembly error is logged and written to the log on every turn.
const (
	// clipBytes bounds one echoed name or value.
	clipBytes = 64
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
