package agentloop

import (
	"context"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/promptasm"
	"github.com/dshd/dshd/pkg/registry"
)

func headerReasons(t *testing.T, h *harness) []string {
	var out []string
	for _, ev := range h.ofType(eventlog.TypeRequestHeader) {
		out = append(out, decode[eventlog.RequestHeader](t, ev.Data).Reason)
	}
	return out
}

func TestLOOP3_RequestHeaderOncePerInstanceAndOnChange(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	r := NewRunner(h.cfg, h.j)
	h.post(eventlog.InboxNextTurn, "tools:1 steps:3")
	if _, err := r.Serve(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := headerReasons(t, h); len(got) != 1 || got[0] != "initial" {
		t.Fatalf("after a 4-step turn: header reasons %v, want [initial]", got)
	}
	// A prompt change between turns changes the canonical header.
	if _, err := h.cfg.Prompt.Section(promptasm.Global, promptasm.Section{Name: "extra", Order: 5, Text: "Be brief."}); err != nil {
		t.Fatal(err)
	}
	h.post(eventlog.InboxNextTurn, "text")
	if _, err := r.Serve(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := headerReasons(t, h); len(got) != 2 || got[1] != "change" {
		t.Fatalf("after a prompt change: %v, want [initial change]", got)
	}
	// A new loop instance (another worker picking the session up) logs its first header as resume.
	h.post(eventlog.InboxNextTurn, "text")
	if _, err := NewRunner(h.cfg, h.j).Serve(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := headerReasons(t, h); len(got) != 3 || got[2] != "resume" {
		t.Fatalf("after a new instance: %v, want [initial change resume]", got)
	}
	if n := len(h.ofType(eventlog.TypeRequestContext)); n != 1 {
		t.Fatalf("%d request/context events, want 1 (the route never changed)", n)
	}
	h.checkInvariants()
}

func TestLOOP5_ConcludingBatchWithContextsRunsOneMoreStep(t *testing.T) {
	t.Parallel()
	tool, err := registry.Define(registry.DefineSpec[struct{}, string]{Name: "wrapup", Description: "End with a note."},
		func(_ context.Context, exec *registry.Execution, _ struct{}) (string, error) {
			m := llm.NewUserMessage("note-"+exec.CallID, "a note")
			m.Source = llm.Source{Kind: llm.SourcePlugin, Plugin: "test"}
			exec.DeferContext(m)
			exec.ConcludeTurn()
			return "done", nil
		})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, nil, tool)
	h.post(eventlog.InboxNextTurn, "tool:wrapup args:{}")
	reasons := h.serve(context.Background())
	if reasons[0].Kind != eventlog.EndCompleted {
		t.Fatalf("reasons %+v", reasons)
	}
	if n := len(h.ofType(eventlog.TypeStepStart)); n != 2 {
		t.Fatalf("%d steps, want 2: the context enters one more step", n)
	}
	h.checkInvariants()
}

func TestLOOP6_ContextHandoffIsLoggedRightAfterItsResult(t *testing.T) {
	t.Parallel()
	g, tool := newGate(t)
	close(g.release)
	h := newHarness(t, nil, tool)
	h.post(eventlog.InboxNextTurn, "tools:2 tool:gate")
	h.serve(context.Background())
	evs := h.j.Events()
	handoffs := 0
	for i, ev := range evs {
		if ev.Type != eventlog.TypeToolResult {
			continue
		}
		next := evs[i+1]
		s := decode[eventlog.InboxSpliced](t, next.Data)
		if next.Type != eventlog.TypeInboxSpliced || s.Target != eventlog.InboxNextStep || len(s.Inserted) != 1 {
			t.Fatalf("after tool/result %d: %s %s", ev.Seq, next.Type, next.Data)
		}
		handoffs++
	}
	if handoffs != 2 {
		t.Fatalf("%d handoffs", handoffs)
	}
	h.checkInvariants()
}

// recordBatches records the event types of every batch the journal commits.
func recordBatches(h *harness) *[][]string {
	var batches [][]string
	h.j.OnAppend = func(evs []eventlog.Event) {
		var b []string
		for _, ev := range evs {
			b = append(b, ev.Type)
		}
		batches = append(batches, b)
	}
	return &batches
}

// batchWith returns the index of the first batch holding an event of type typ, or -1.
func batchWith(batches [][]string, typ string) int {
	for i, b := range batches {
		for _, t := range b {
			if t == typ {
				return i
			}
		}
	}
	return -1
}

func TestSCHED4_ParallelResultsRideTheNextBatchExclusiveOnesDoNot(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	batches := recordBatches(h)
	h.post(eventlog.InboxNextTurn, "tools:2")
	h.serve(context.Background())
	// echo is concurrency-safe: its results are written with the step's end and the next step.
	if r, e := batchWith(*batches, eventlog.TypeToolResult), batchWith(*batches, eventlog.TypeStepEnd); r < 0 || r != e {
		t.Fatalf("parallel results in batch %d, step/end in %d: %v", r, e, *batches)
	}
	h.checkInvariants()

	x := newHarness(t, nil)
	xb := recordBatches(x)
	x.post(eventlog.InboxNextTurn, `tool:sleep args:{"ms":1,"text":"z"}`)
	x.serve(context.Background())
	// sleep is exclusive: its result is durable before the step ends.
	if r, e := batchWith(*xb, eventlog.TypeToolResult), batchWith(*xb, eventlog.TypeStepEnd); r < 0 || r >= e {
		t.Fatalf("exclusive result in batch %d, step/end in %d: %v", r, e, *xb)
	}
	x.checkInvariants()
}
