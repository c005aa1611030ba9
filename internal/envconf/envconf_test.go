package envconf

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

type inner struct {
	Level slog.Level `env:"T_LEVEL" default:"info"`
}

type sample struct {
	Name    string        `env:"T_NAME" default:"dshd" doc:"a «name»"`
	Token   string        `env:"T_TOKEN,secret,raw" minlen:"4" defaultdoc:"empty: none"`
	Mode    string        `env:"T_MODE" default:"a" oneof:"a,b,c"`
	List    []string      `env:"T_LIST" default:"x, y"`
	On      bool          `env:"T_ON" default:"0"`
	Count   int           `env:"T_COUNT" default:"3" min:"1"`
	Bytes   int64         `env:"T_BYTES" default:"0" min:"0" unit:"bytes" zero:"no bound"`
	Slots   int           `env:"T_SLOTS" min:"1" max:"10"`
	Rate    float64       `env:"T_RATE" default:"1.5" min:"0" unit:"posts a second" zero:"no limit"`
	Wait    time.Duration `env:"T_WAIT" default:"15s"`
	TTL     time.Duration `env:"T_TTL" default:"5m" max:"1h"`
	Pair    [2]int        `env:"T_PAIR" default:"1:2"`
	Nested  inner
	Derived string
}

func parsePair(s string) ([2]int, error) {
	a, b, ok := strings.Cut(s, ":")
	if !ok || a == "" || b == "" {
		return [2]int{}, errors.New("must be a:b")
	}
	return [2]int{len(a), len(b)}, nil
}

func load(env map[string]string) (sample, error) {
	s := sample{Slots: 7}
	err := Load(func(k string) string { return env[k] }, &s, Decode(parsePair))
	return s, err
}

// TestLoadDefaults: unset or blank variables take the default tag, or keep the field's value
// when there is none; raw values are not trimmed.
func TestLoadDefaults(t *testing.T) {
	t.Parallel()
	s, err := load(map[string]string{"T_NAME": "  ", "T_TOKEN": " abcd "})
	if err != nil {
		t.Fatal(err)
	}
	want := sample{Name: "dshd", Token: " abcd ", Mode: "a", List: []string{"x", "y"}, Count: 3, Slots: 7, Rate: 1.5,
		Wait: 15 * time.Second, TTL: 5 * time.Minute, Pair: [2]int{1, 1}}
	if s.Name != want.Name || s.Token != want.Token || s.Mode != want.Mode || !slices.Equal(s.List, want.List) ||
		s.Count != want.Count || s.Slots != want.Slots || s.Rate != want.Rate || s.Wait != want.Wait || s.TTL != want.TTL ||
		s.Pair != want.Pair || s.Nested.Level != slog.LevelInfo || s.On || s.Bytes != 0 {
		t.Fatalf("loaded %+v", s)
	}
}

// TestLoadValues: every kind is read from its variable.
func TestLoadValues(t *testing.T) {
	t.Parallel()
	s, err := load(map[string]string{"T_NAME": " n ", "T_MODE": "c", "T_LIST": "p,,q ", "T_ON": "yes", "T_COUNT": "9",
		"T_BYTES": "4096", "T_SLOTS": "10", "T_RATE": "0", "T_WAIT": "250ms", "T_TTL": "1h", "T_PAIR": "aa:bbb", "T_LEVEL": "warn"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "n" || s.Mode != "c" || !slices.Equal(s.List, []string{"p", "q"}) || !s.On || s.Count != 9 || s.Bytes != 4096 ||
		s.Slots != 10 || s.Rate != 0 || s.Wait != 250*time.Millisecond || s.TTL != time.Hour || s.Pair != [2]int{2, 3} ||
		s.Nested.Level != slog.LevelWarn {
		t.Fatalf("loaded %+v", s)
	}
}

// TestLoadErrors: a bad value is refused with a message naming the variable and what it takes;
// a secret's value is never quoted.
func TestLoadErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, value, want string }{
		{"T_TOKEN", "abc", "T_TOKEN must be at least 4 bytes"},
		{"T_MODE", "d", `T_MODE must be a, b or c (got "d")`},
		{"T_ON", "maybe", `T_ON must be 1 or 0 (got "maybe")`},
		{"T_COUNT", "0", "T_COUNT must be a positive integer"},
		{"T_COUNT", "x", "T_COUNT must be a positive integer"},
		{"T_BYTES", "-1", "T_BYTES must be a number of bytes (0: no bound)"},
		{"T_SLOTS", "11", "T_SLOTS must be an integer from 1 to 10"},
		{"T_RATE", "-1", `T_RATE must be a non-negative number of posts a second, 0 for no limit (got "-1")`},
		{"T_RATE", "NaN", `T_RATE must be a non-negative number of posts a second, 0 for no limit (got "NaN")`},
		{"T_WAIT", "0s", `T_WAIT must be a positive Go duration such as 15s (got "0s")`},
		{"T_TTL", "2h", "T_TTL must be a positive Go duration of at most 1h"},
		{"T_PAIR", "ab", "T_PAIR: must be a:b"},
		{"T_LEVEL", "loud", "T_LEVEL: "},
	} {
		_, err := load(map[string]string{c.name: c.value})
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s=%s: %v, want %q", c.name, c.value, err, c.want)
		}
	}
}

// TestLoadUnknownKind: a type Load cannot read is an error naming the setting, not a panic.
func TestLoadUnknownKind(t *testing.T) {
	t.Parallel()
	var s struct {
		Pair [2]int `env:"T_PAIR" default:"1:2"`
	}
	if err := Load(func(string) string { return "" }, &s); err == nil || !strings.Contains(err.Error(), "T_PAIR") {
		t.Fatalf("got %v", err)
	}
	if err := Load(func(string) string { return "" }, s); err == nil {
		t.Fatal("a struct value (no pointer) was accepted")
	}
}

// TestFormatHidesSecrets: Format lists every setting, a secret only as set.
func TestFormatHidesSecrets(t *testing.T) {
	t.Parallel()
	s, err := load(map[string]string{"T_TOKEN": "hunter22"})
	if err != nil {
		t.Fatal(err)
	}
	got := Format(s)
	if strings.Contains(got, "hunter22") || !strings.Contains(got, "T_TOKEN=[set]") || !strings.Contains(got, "T_LIST=x,y") ||
		!strings.Contains(got, "T_LEVEL=INFO") || !strings.Contains(got, "T_NAME=dshd ") {
		t.Fatalf("Format: %s", got)
	}
	if s.Token = ""; !strings.Contains(Format(&s), "T_TOKEN= ") {
		t.Fatalf("Format of an empty secret: %s", Format(&s))
	}
}

// TestTable: one row a setting in field order, the default as code or as its defaultdoc, «» as
// backquotes, a | escaped.
func TestTable(t *testing.T) {
	t.Parallel()
	var s struct {
		A string `env:"T_A" default:"x" doc:"the «a» | b"`
		B int    `env:"T_B" defaultdoc:"«0»: none"`
		C string `env:"T_C"`
	}
	want := "| variable | default | meaning |\n|---|---|---|\n" +
		"| `T_A` | `x` | the `a` \\| b |\n" +
		"| `T_B` | `0`: none |  |\n" +
		"| `T_C` | empty |  |\n"
	if got := Table(&s); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if got := Settings(s); len(got) != 3 || got[1].Name != "T_B" || got[1].Field != "B" {
		t.Fatalf("Settings: %+v", got)
	}
}

// TestReplace: the lines between the markers are replaced; a missing, repeated or reversed
// marker is an error.
func TestReplace(t *testing.T) {
	t.Parallel()
	doc := "head\n<!-- b -->\nold\nrows\n<!-- e -->\ntail\n"
	got, err := Replace([]byte(doc), "<!-- b -->", "<!-- e -->", "new\n")
	if err != nil || string(got) != "head\n<!-- b -->\nnew\n<!-- e -->\ntail\n" {
		t.Fatalf("%q, %v", got, err)
	}
	for _, bad := range []string{"head\n", "<!-- e -->\n<!-- b -->\n", "<!-- b -->\n<!-- b -->\n<!-- e -->\n"} {
		if _, err := Replace([]byte(bad), "<!-- b -->", "<!-- e -->", "new\n"); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestCheck: well-formed tags pass; a malformed bound, a bound on a string, a bad default and a
// name read twice are each reported.
func TestCheck(t *testing.T) {
	t.Parallel()
	if err := Check(sample{}, Decode(parsePair)); err != nil {
		t.Fatalf("sample: %v", err)
	}
	if err := Check(sample{}); err == nil || !strings.Contains(err.Error(), "T_PAIR") {
		t.Fatalf("without the pair's decoder: %v", err)
	}
	var bad struct {
		A int           `env:"T_A" min:"one"`
		B string        `env:"T_B" max:"3"`
		C time.Duration `env:"T_C" default:"soon"`
		D bool          `env:"T_A"`
		E int           `env:"T_E" minlen:"3"`
		F time.Duration `env:"T_F" min:"1s"`
	}
	err := Check(&bad)
	for _, want := range []string{"T_A (A): tag min", "T_B (B): tag max", `T_C (C): default "soon"`, "T_A is read by two fields",
		"T_E (E): tag minlen", "T_F (F): tag min"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check: %v, want %q", err, want)
		}
	}
}
