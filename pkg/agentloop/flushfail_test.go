package agentloop

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
)

// failOnceJournal is a journal whose first append fails.
type failOnceJournal struct {
	*eventlog.MemJournal
	mu     sync.Mutex
	failed bool
}

var errAppendOnce = errors.New("the database is gone for one statement")

func (j *failOnceJournal) Append(ctx context.Context, build eventlog.BuildFunc) ([]eventlog.Event, error) {
	j.mu.Lock()
	first := !j.failed
	j.failed = true
	j.mu.Unlock()
	if first {
		return nil, errAppendOnce
	}
	return j.MemJournal.Append(ctx, build)
}

// TestAFailedCommitIsNeverAppendedLater: review 18 P2-a found that a failed Commit of a tool body
// (the tool told "error", e.g. for its approval/asked) stayed staged in the writer, and the
// step's flusher or the body's next Commit committed it anyway: events the tool believed failed
// reached the log. After a failed commit every later commit of the step returns the first error
// and appends nothing, and the failed batch never reaches the log.
func TestAFailedCommitIsNeverAppendedLater(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	fj := &failOnceJournal{MemJournal: h.j}
	r := NewRunner(h.cfg, fj)
	ctx := context.Background()
	if err := r.w.catchUp(ctx); err != nil {
		t.Fatal(err)
	}
	before := len(h.j.Events())
	em := &stepEmitter{r: r, turn: 1, step: 1}
	sctx, cancelStep := context.WithCancelCause(ctx)
	defer cancelStep(nil)
	stop := em.startFlusher(sctx, cancelStep)
	defer stop()
	ask := func(id string) eventlog.NewEvent {
		return eventlog.Of(eventlog.ApprovalAsked{ID: id, ToolName: "bash", CallID: "c-" + id})
	}
	if _, err := em.Commit(ctx, ask("failed")); !errors.Is(err, errAppendOnce) {
		t.Fatalf("the first commit: %v, want the append's error", err)
	}
	if _, err := em.Commit(ctx, ask("later")); !errors.Is(err, errAppendOnce) {
		t.Fatalf("a commit after the failed one: %v, want the first error", err)
	}
	if err := em.CommitFunc(ctx, func([]eventlog.Event) ([]eventlog.NewEvent, error) {
		return []eventlog.NewEvent{ask("built")}, nil
	}); !errors.Is(err, errAppendOnce) {
		t.Fatalf("a CommitFunc after the failed commit: %v, want the first error", err)
	}
	em.mu.Lock()
	err := em.flushLocked(ctx)
	em.mu.Unlock()
	if !errors.Is(err, errAppendOnce) {
		t.Fatalf("a flush after the failed commit: %v, want the first error", err)
	}
	stop()
	if evs := h.j.Events(); len(evs) != before {
		t.Fatalf("%d events appended after the failed commit: %v", len(evs)-before, evs[before:])
	}
}
