package eventlog_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	et "github.com/dshd/dshd/pkg/eventlog/eventlogtest"
)

// countingJournal counts the reads of a journal and tells when a Wait starts.
type countingJournal struct {
	*eventlog.MemJournal
	reads   atomic.Int64
	waiting chan int64 // the after of every Wait, as it starts
}

func (j *countingJournal) Since(ctx context.Context, after int64) ([]eventlog.Event, error) {
	j.reads.Add(1)
	return j.MemJournal.Since(ctx, after)
}

func (j *countingJournal) Wait(ctx context.Context, after int64) error {
	j.waiting <- after
	return j.MemJournal.Wait(ctx, after)
}

// A cursor that the caller moves while Follow waits (a batch handed over in process) covers the
// batch whose commit wakes Follow: Follow waits again instead of reading it back, and still
// reads, and hands over, the next batch it does not cover.
func TestFollowDoesNotReadWhatTheMovedCursorCovers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	j := &countingJournal{MemJournal: eventlog.NewMemJournal(nil), waiting: make(chan int64, 16)}
	first, err := j.Append(ctx, eventlog.Batch(et.TurnStart(1)))
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64
	seen.Store(first[0].Seq)
	got := make(chan []eventlog.Event, 4)
	done := make(chan error, 1)
	go func() {
		done <- eventlog.Follow(ctx, j, seen.Load, func(evs []eventlog.Event) error {
			seen.Store(max(seen.Load(), evs[len(evs)-1].Seq))
			got <- evs
			return nil
		})
	}()
	if after := <-j.waiting; after != first[0].Seq {
		t.Fatalf("Follow waited after %d, want %d", after, first[0].Seq)
	}
	// Handed over in process: the cursor moves before the commit wakes Follow.
	seen.Store(first[0].Seq + 1)
	handed, err := j.Append(ctx, eventlog.Batch(et.StepStart(1, 1)))
	if err != nil || handed[0].Seq != first[0].Seq+1 {
		t.Fatalf("append: %v %v", handed, err)
	}
	if after := <-j.waiting; after != handed[0].Seq {
		t.Fatalf("Follow waited again after %d, want %d", after, handed[0].Seq)
	}
	if n := j.reads.Load(); n != 0 {
		t.Fatalf("Follow read the log %d times for a batch its cursor covered", n)
	}
	next, err := j.Append(ctx, eventlog.Batch(et.StepEnd(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case evs := <-got:
		if len(evs) != 1 || evs[0].Seq != next[0].Seq || evs[0].Type != "step/end" {
			t.Fatalf("Follow handed %+v, want the step/end at seq %d", evs, next[0].Seq)
		}
	case err := <-done:
		t.Fatalf("Follow ended: %v", err)
	case <-ctx.Done():
		t.Fatal("Follow did not hand over the batch after the cursor")
	}
	if n := j.reads.Load(); n != 1 {
		t.Fatalf("Follow read the log %d times, want 1", n)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("Follow ended without the context's error")
	}
}
