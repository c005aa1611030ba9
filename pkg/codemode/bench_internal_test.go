package codemode

import (
	"context"
	"encoding/json"
	"testing"
)

// noHost accepts no calls.
type noHost struct{ box *mailbox }

func (h noHost) submit(int, string, json.RawMessage) string { return "no tools" }
func (h noHost) mailbox() *mailbox                          { return h.box }
func (h noHost) stepped(bool)                               {}
func (h noHost) halt()                                      {}

// BenchmarkStrip is esbuild's TypeScript strip of a small program.
func BenchmarkStrip(b *testing.B) {
	for b.Loop() {
		if _, err := strip(`const x: number = 1; return x;`); err != nil {
			b.Fatal(err.msg)
		}
	}
}

// BenchmarkEngine is a fresh engine, the prelude and a program of `return 1`, without strip.
func BenchmarkEngine(b *testing.B) {
	cfg, _ := Config{}.withDefaults()
	js, _ := strip(`return 1;`)
	h := noHost{box: newMailbox()}
	for b.Loop() {
		if out := run(context.Background(), &cfg, js, []string{"echo", "sleep"}, h, nil); out.err != nil {
			b.Fatal(out.err.msg)
		}
	}
}
