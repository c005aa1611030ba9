package promptasm

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/llm"
)

func TestPRM9_SnapshotRendering(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{Persona: "Persona."})
	must(t)(r.RuntimeContext(Global, ContextEntry{Name: "workspace", Order: 20, Text: "Workspace {{cwd}}."}))
	must(t)(r.RuntimeContext(Global, ContextEntry{Name: "clock", Order: 10, TextFunc: func(context.Context, Input) (string, error) {
		return "It is noon.", nil
	}}))
	must(t)(r.RuntimeContext(Global, ContextEntry{Name: "idle", Order: 15}))
	must(t)(r.RuntimeContext("agent", ContextEntry{Name: "workspace", Order: 20, Text: "Agent workspace {{cwd}}."}))
	res := assemble(t, r, Input{CWD: "/w"})
	want := SnapshotHeader + "\n\nIt is noon.\n\nWorkspace /w."
	if res.RuntimeContext.Text != want {
		t.Fatalf("snapshot = %q\nwant       %q", res.RuntimeContext.Text, want)
	}
	if got := res.RuntimeContext.Names(); !slices.Equal(got, []string{"clock", "workspace"}) {
		t.Fatalf("names = %v", got)
	}
	if strings.Contains(res.System, "noon") {
		t.Fatalf("runtime context leaked into the system prompt: %q", res.System)
	}
	scoped := assemble(t, r, Input{Chain: Chain{"agent"}, CWD: "/w"}).RuntimeContext.Text
	if !strings.HasSuffix(scoped, "\n\nAgent workspace /w.") {
		t.Fatalf("scoped snapshot = %q", scoped)
	}
	empty := newRegistry(t, Config{})
	must(t)(empty.RuntimeContext(Global, ContextEntry{Name: "idle"}))
	if snap := assemble(t, empty, Input{}).RuntimeContext; snap.Text != "" || snap.Names() != nil {
		t.Fatalf("all-empty snapshot = %+v", snap)
	}
}

func TestPRM9_SnapshotterEmitsOnlyChanges(t *testing.T) {
	t.Parallel()
	a := newSnapshot([]SectionText{{Name: "clock", Text: "Noon."}})
	b := newSnapshot([]SectionText{{Name: "clock", Text: "One."}, {Name: "git", Text: "Clean."}})
	var s Snapshotter
	steps := []struct {
		snap Snapshot
		want string // "" = no message
	}{
		{Snapshot{}, ""},
		{a, a.Text},
		{a, ""},
		{b, b.Text},
		{Snapshot{}, SnapshotNone},
		{Snapshot{}, ""},
		{a, a.Text},
	}
	for i, step := range steps {
		msg, ok := s.Next("m", step.snap)
		if ok != (step.want != "") || (ok && msg.Text() != step.want) {
			t.Fatalf("step %d: Next = %q, %v; want %q", i, msg.Text(), ok, step.want)
		}
	}
	s.Reset()
	if _, ok := s.Next("m", Snapshot{}); ok {
		t.Fatal("an empty snapshot after Reset emitted a message")
	}
	if msg, ok := s.Next("m", a); !ok || msg.Text() != a.Text {
		t.Fatalf("after Reset Next = %q, %v; want the snapshot again", msg.Text(), ok)
	}
	s.Keep(b.Text)
	if _, ok := s.Next("m", b); ok || s.Kept() != b.Text {
		t.Fatal("a kept snapshot was emitted again")
	}
}

func TestPRM9_SnapshotMessageShape(t *testing.T) {
	t.Parallel()
	var s Snapshotter
	snap := newSnapshot([]SectionText{{Name: "clock", Text: "Noon."}, {Name: "git", Text: "Clean."}})
	msg, ok := s.Next("m7", snap)
	if !ok {
		t.Fatal("no message")
	}
	if err := msg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	got, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"m7","role":"user","content":[{"type":"text","text":"` + SnapshotHeader +
		`\n\nNoon.\n\nClean."}],"source":{"kind":"plugin","plugin":"@monotykamary/dsh-system-prompt","form":"snapshot","sections":["clock","git"]}}`
	if string(got) != want {
		t.Fatalf("message = %s\nwant      %s", got, want)
	}
	none, ok := s.Next("m8", Snapshot{})
	src := none.Source
	if !ok || src.Kind != llm.SourcePlugin || src.Plugin != SnapshotPlugin || src.Form != SnapshotForm ||
		src.Sections != nil || none.ID != "m8" || none.Text() != SnapshotNone {
		t.Fatalf("none marker = %+v, %v", none, ok)
	}
}
