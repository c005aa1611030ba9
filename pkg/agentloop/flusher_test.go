package agentloop

import (
	"context"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
)

// TestParallelCallsAreCommittedWhileTheyRun: while four concurrency-safe calls are held by the
// test, the log already holds the step's turn/start, assistant/message and every tool/call
// (docs/rules.md, log-window); the results follow once the calls return. Finding (issue 18):
// the model's message and the calls of a parallel launch were staged for the runner's next
// batch, which came only when the calls returned, so nothing of the step was visible while they
// ran.
func TestParallelCallsAreCommittedWhileTheyRun(t *testing.T) {
	t.Parallel()
	g, tool := newGate(t)
	h := newHarness(t, nil, tool)
	h.post(eventlog.InboxNextTurn, "tools:4 tool:gate")
	appended := make(chan struct{}, 1)
	h.j.OnAppend = func([]eventlog.Event) {
		select {
		case appended <- struct{}{}:
		default:
		}
	}
	done := h.serveAsync(NewRunner(h.cfg, h.j))
	for range 4 {
		<-g.started
	}
	// A generous bound on a property (the calls are committed while they are held), not a
	// measure of speed: the window is 50 ms.
	bound := time.After(10 * time.Second)
	for !committedCalls(h, 4) {
		select {
		case <-appended:
		case <-bound:
			t.Fatalf("the calls run, and the log holds only %v", h.types())
		}
	}
	if n := len(h.ofType(eventlog.TypeToolResult)); n != 0 {
		t.Fatalf("%d results committed while every call is held", n)
	}
	close(g.release)
	if s := <-done; s.err != nil || len(s.reasons) != 1 || s.reasons[0].Kind != eventlog.EndCompleted {
		t.Fatalf("served %+v, %v", s.reasons, s.err)
	}
	h.checkInvariants()
}

// committedCalls reports whether the log holds turn/start, an assistant/message and n tool/calls.
func committedCalls(h *harness, n int) bool {
	return len(h.ofType(eventlog.TypeTurnStart)) == 1 && len(h.ofType(eventlog.TypeAssistantMessage)) == 1 &&
		len(h.ofType(eventlog.TypeToolCall)) == n
}

// TestFlusherStopsWithTheStep: a step whose calls settle inside the window leaves the flusher
// nothing to do, and the runner's writer is no longer watched once the step returned.
func TestFlusherStopsWithTheStep(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.post(eventlog.InboxNextTurn, "tools:2 tool:echo")
	r := NewRunner(h.cfg, h.j)
	if _, err := r.Serve(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r.w.staged != nil {
		t.Fatal("the writer still signals a flusher after the step")
	}
	h.checkInvariants()
}
