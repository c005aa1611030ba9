package scheduler

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/dshd/dshd/pkg/registry"
)

func TestSCHED2_ExclusiveCallIsAGroupOfOne(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	h.set("x1", spec{exclusive: true, gated: true})
	h.set("x2", spec{exclusive: true, gated: true})
	done := h.start(context.Background(), "x1", "x2")
	h.awaitStarted("x1")
	h.awaitWait() // the lane is blocked on x1's body and has not started x2
	if i := h.tr.index("call:x2"); i >= 0 {
		t.Fatalf("x2 started while x1 was running: %v", h.tr.all())
	}
	h.pipe.release("x1")
	h.awaitStarted("x2")
	if h.tr.index("result:x1") > h.tr.index("call:x2") {
		t.Errorf("x2 started before x1 committed: %v", h.tr.all())
	}
	h.pipe.release("x2")
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
}

func TestSCHED2_ReclassifiedJustBeforeStart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	var flip atomic.Bool // c2 becomes exclusive once c1's body has run
	h.set("c1", spec{gated: true})
	h.set("c2", spec{modeFunc: func() registry.Mode {
		if flip.Load() {
			return registry.Exclusive
		}
		return registry.Parallel
	}})
	h.set("c3", spec{})
	flip.Store(false)
	done := h.start(context.Background(), "c1", "c2", "c3")
	h.awaitStarted("c1")
	h.awaitStarted("c2")
	h.awaitStarted("c3")
	h.pipe.release("c1")
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
	// Each call is classified after the previous call's prepare resolved, never up front.
	for _, pair := range [][2]string{{"prep:c1", "mode:c2"}, {"prep:c2", "mode:c3"}} {
		if h.tr.index(pair[0]) > h.tr.index(pair[1]) {
			t.Errorf("%s after %s: %v", pair[0], pair[1], h.tr.all())
		}
	}

	// Now flip c2 before the step: the pool stops at c2, which waits for c1 to commit.
	h2 := newHarness(t, Config{})
	flip2 := atomic.Bool{}
	flip2.Store(true)
	h2.set("c1", spec{gated: true})
	h2.set("c2", spec{modeFunc: func() registry.Mode {
		if flip2.Load() {
			return registry.Exclusive
		}
		return registry.Parallel
	}})
	done = h2.start(context.Background(), "c1", "c2", "c3")
	h2.awaitStarted("c1")
	h2.awaitWait()
	if h2.tr.index("call:c2") >= 0 {
		t.Fatalf("exclusive c2 started beside c1: %v", h2.tr.all())
	}
	flip2.Store(false) // re-classified at its own group start: parallel again, so c3 joins it
	h2.pipe.release("c1")
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
	if got := h2.tr.only("mode"); !slices.Equal(got, []string{"mode:c1", "mode:c2", "mode:c2", "mode:c3"}) {
		t.Errorf("classifications = %v", got)
	}
}

func TestSCHED2_CapReReadPerGroup(t *testing.T) {
	t.Parallel()
	var reads atomic.Int32
	caps := []int{1, 2}
	h := newHarness(t, Config{MaxParallelToolCallsFunc: func() int { return caps[reads.Add(1)-1] }})
	for _, id := range []string{"a1", "a2", "b1", "b2"} {
		h.set(id, spec{gated: true})
	}
	h.set("x", spec{exclusive: true})
	done := h.start(context.Background(), "a1", "a2", "x", "b1", "b2")
	h.awaitStarted("a1")
	h.awaitWait()
	if h.tr.index("call:a2") >= 0 {
		t.Fatalf("cap 1 group ran two calls: %v", h.tr.all())
	}
	h.pipe.release("a1")
	h.awaitStarted("a2")
	h.pipe.release("a2")
	h.awaitStarted("x")
	h.awaitStarted("b1", "b2") // cap 2 for the second parallel group
	h.pipe.release("b1")
	h.pipe.release("b2")
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
	if n := reads.Load(); n != 2 {
		t.Errorf("cap read %d times, want once per parallel group (2)", n)
	}
}

func TestSCHED2_DefaultCapIsTen(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	ids := make([]string, 12)
	for i := range ids {
		ids[i] = string(rune('a' + i))
		h.set(ids[i], spec{gated: true})
	}
	done := h.start(context.Background(), ids...)
	h.awaitStarted(ids[:10]...)
	h.awaitWait()
	if h.tr.index("call:"+ids[10]) >= 0 {
		t.Fatalf("an 11th call started with 10 in flight: %v", h.tr.all())
	}
	for _, id := range ids {
		h.pipe.release(id)
	}
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
	if h.pipe.maxRunning != 10 {
		t.Errorf("max bodies in flight = %d, want 10", h.pipe.maxRunning)
	}
}

func TestSCHED2_InvalidCapIsInternalFailure(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{MaxParallelToolCallsFunc: func() int { return 0 }})
	out, err := h.run(context.Background(), "c1", "c2")
	if !errors.Is(err, ErrInvalidMaxParallel) {
		t.Fatalf("err = %v, want ErrInvalidMaxParallel", err)
	}
	if got := h.tr.only("call", "result"); len(got) != 0 || len(out.Results) != 0 {
		t.Errorf("events %v, results %v; want none", got, out.Results)
	}
}

func TestSCHED2_PanickingClassifierMeansExclusive(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	h.set("c1", spec{gated: true})
	h.set("c2", spec{panicAt: "mode"})
	done := h.start(context.Background(), "c1", "c2")
	h.awaitStarted("c1")
	h.awaitWait()
	if h.tr.index("call:c2") >= 0 {
		t.Fatalf("c2 (classifier panicked) started beside c1: %v", h.tr.all())
	}
	h.pipe.release("c1")
	if r := <-done; r.err != nil || len(r.out.Results) != 2 {
		t.Fatalf("RunStep = %+v", r)
	}
}
