package scheduler

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseArguments checks SCHED-1 on any input: never panics, always valid UTF-8 JSON; valid
// JSON stays the same value byte for byte up to insignificant whitespace; anything else becomes
// the JSON string of the raw text.
func FuzzParseArguments(f *testing.F) {
	for _, s := range []string{"", "{}", `{"text":"hi"}`, `{"text":`, "null", "[1,2", "\xff", " ", `"\u00e9"`, `{"a":1e999}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got := ParseArguments(raw)
		if !json.Valid(got) || !utf8.Valid(got) {
			t.Fatalf("ParseArguments(%q) = %q: not valid UTF-8 JSON", raw, got)
		}
		if raw == "" {
			if string(got) != "{}" {
				t.Fatalf("empty input gave %s", got)
			}
			return
		}
		clean := strings.ToValidUTF8(raw, "\uFFFD")
		if json.Valid([]byte(clean)) {
			var want bytes.Buffer
			if err := json.Compact(&want, []byte(clean)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("valid JSON %q changed to %s", raw, got)
			}
			return
		}
		var s string
		if err := json.Unmarshal(got, &s); err != nil {
			t.Fatalf("invalid JSON %q did not become a string: %s", raw, got)
		}
		if s != clean {
			t.Fatalf("string value %q, want %q", s, clean)
		}
	})
}
