package agentloop

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/llm/scripted"
	"github.com/dshd/dshd/pkg/promptasm"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/scheduler"
	"github.com/dshd/dshd/pkg/tools/demo"
	"github.com/dshd/dshd/pkg/tools/todo"
)

// harness is one in-process agent: a eventlog.MemJournal, the scripted model, the real registry,
// scheduler and prompt assembly, with the demo tools and todo_write registered globally.
type harness struct {
	t   *testing.T
	j   *eventlog.MemJournal
	k   *kernel.Kernel
	reg *registry.Registry
	cfg Config
}

func newHarness(t *testing.T, p llm.Provider, extra ...*registry.Tool) *harness {
	t.Helper()
	k := kernel.New(nil)
	reg, err := registry.New(registry.Config{Scopes: k.Scopes()})
	if err != nil {
		t.Fatal(err)
	}
	tools, err := demo.Tools()
	if err != nil {
		t.Fatal(err)
	}
	td, err := todo.Tool()
	if err != nil {
		t.Fatal(err)
	}
	g := k.Fiber("tools", nil)
	for _, tl := range append(append(tools, td), extra...) {
		if _, err := reg.Register(g, tl); err != nil {
			t.Fatal(err)
		}
	}
	pr, err := promptasm.New(promptasm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pr.Tools(promptasm.Global, func(context.Context, promptasm.Input) (promptasm.ToolSet, error) {
		s, err := reg.Schemas("")
		return promptasm.ToolSet{Schemas: s}, err
	}); err != nil {
		t.Fatal(err)
	}
	if p == nil {
		p = scripted.New(scripted.Config{})
	}
	cfg := Config{
		SessionID: "s1", Model: llm.Config{Provider: "scripted", Model: "scripted-1"},
		Provider: p, Prompt: pr, Tools: reg, Scheduler: scheduler.New(reg, scheduler.Config{}),
		RetryBackoff: time.Millisecond,
	}
	return &harness{t: t, j: eventlog.NewMemJournal(nil), k: k, reg: reg, cfg: cfg}
}

// post inserts a user message as an HTTP handler would: at the end of the next-turn list.
func (h *harness) post(target, text string) llm.Message {
	h.t.Helper()
	msg := llm.NewUserMessage("u-"+text+"-"+time.Now().Format("150405.000000000"), text)
	_, err := h.j.Append(context.Background(), func(hd eventlog.Head) ([]eventlog.NewEvent, error) {
		n := hd.Inbox.NextTurn
		if target == eventlog.InboxNextStep {
			n = hd.Inbox.NextStep
		}
		return []eventlog.NewEvent{{Type: eventlog.TypeInboxSpliced, Data: eventlog.Insertion(target, n, msg)}}, nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return msg
}

func (h *harness) serve(ctx context.Context) []Reason {
	h.t.Helper()
	reasons, err := NewRunner(h.cfg, h.j).Serve(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return reasons
}

// types returns the event types of the log.
func (h *harness) types() []string {
	var out []string
	for _, ev := range h.j.Events() {
		out = append(out, ev.Type)
	}
	return out
}

func (h *harness) ofType(typ string) []eventlog.Event {
	var out []eventlog.Event
	for _, ev := range h.j.Events() {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func (h *harness) checkInvariants() {
	h.t.Helper()
	if err := eventlog.CheckInvariants(h.j.Events()); err != nil {
		h.t.Fatalf("SES-10 invariants: %v\n%v", err, h.types())
	}
}

func decode[T any](t *testing.T, raw json.RawMessage) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return v
}

// subsequence reports whether want appears in got in order (not necessarily adjacent).
func subsequence(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}
