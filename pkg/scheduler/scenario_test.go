package scheduler

import (
	"context"
	"slices"
	"testing"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
)

// Scenarios 20 to 25 of docs/rules.md (the scheduler: SCHED-2, SCHED-4, SCHED-6, LOOP-6), through
// the real registry.

func TestScenario20_SlowEarlierCallHoldsBackFastLaterCommit(t *testing.T) {
	t.Parallel()
	h := newRegHarness(t, Config{})
	h.gateAll("p1", "p2")
	done := h.start(context.Background(), "p1", "p2")
	h.awaitStarted("p1", "p2") // both start before either completes
	h.awaitWait()
	h.release("p2") // the later call finishes first
	h.awaitWait()   // p2 settled; the lane is waiting for p1 again
	if h.tr.index("result:p2") >= 0 {
		t.Fatalf("p2 committed before p1: %v", h.tr.all())
	}
	h.release("p1")
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	before(t, h.tr, "settle:p2", "settle:p1")
	if got := h.tr.only("result"); !slices.Equal(got, []string{"result:p1", "result:p2"}) {
		t.Errorf("results = %v", got)
	}
}

func TestScenario21_ExclusiveSplitsParallelIntoThreeGroups(t *testing.T) {
	t.Parallel()
	h := newRegHarness(t, Config{})
	h.gateAll("p1", "x", "p2")
	done := h.start(context.Background(), "p1", "x", "p2")
	h.awaitStarted("p1")
	h.awaitWait()
	if h.tr.index("call:x") >= 0 {
		t.Fatalf("x started while p1 ran: %v", h.tr.all())
	}
	h.release("p1")
	h.awaitStarted("x")
	h.awaitWait()
	if h.tr.index("call:p2") >= 0 {
		t.Fatalf("p2 started while x ran: %v", h.tr.all())
	}
	h.release("x")
	h.awaitStarted("p2")
	h.release("p2")
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
	before(t, h.tr, "result:p1", "call:x")
	before(t, h.tr, "result:x", "call:p2")
}

func TestScenario22_CapOfTwoWithFourCalls(t *testing.T) {
	t.Parallel()
	h := newRegHarness(t, Config{MaxParallelToolCallsFunc: func() int { return 2 }})
	ids := []string{"p1", "p2", "p3", "p4"}
	h.gateAll(ids...)
	done := h.start(context.Background(), ids...)
	h.awaitStarted("p1", "p2")
	h.awaitWait()
	if h.tr.index("call:p3") >= 0 {
		t.Fatalf("a third call started with two in flight: %v", h.tr.all())
	}
	h.release("p2") // one settles: the third may start, even though p1 has not committed
	h.awaitStarted("p3")
	h.awaitWait()
	if h.tr.index("call:p4") >= 0 {
		t.Fatalf("p4 started with two in flight: %v", h.tr.all())
	}
	h.release("p1")
	h.awaitStarted("p4")
	h.release("p3")
	h.release("p4")
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
	if h.maxRunning != 2 {
		t.Errorf("max bodies in flight = %d, want 2", h.maxRunning)
	}
	if got := h.tr.only("result"); !slices.Equal(got, []string{"result:p1", "result:p2", "result:p3", "result:p4"}) {
		t.Errorf("results = %v", got)
	}
}

func TestScenario22_CapOfOneIsFullySerial(t *testing.T) {
	t.Parallel()
	h := newRegHarness(t, Config{MaxParallelToolCallsFunc: func() int { return 1 }})
	ids := []string{"p1", "p2", "p3"}
	h.gateAll(ids...)
	done := h.start(context.Background(), ids...)
	for _, id := range ids {
		h.awaitStarted(id)
		h.awaitWait()
		h.release(id)
	}
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
	want := []string{"body:p1", "settle:p1", "body:p2", "settle:p2", "body:p3", "settle:p3"}
	if got := h.tr.only("body", "settle"); !slices.Equal(got, want) || h.maxRunning != 1 {
		t.Errorf("bodies = %v (max in flight %d), want serial", got, h.maxRunning)
	}
}

// addContextListener makes post-execute add one context message per call.
func addContextListener(t *testing.T, h *regHarness) {
	t.Helper()
	_, err := kernel.Listen(h.fiber, h.reg.Hooks.PostExecute, func(ctx context.Context, c *registry.Call, next func(context.Context) (registry.PostDecision, error)) (registry.PostDecision, error) {
		d, err := next(ctx)
		d.AdditionalContexts = append(d.AdditionalContexts, llm.NewUserMessage("ctx-"+c.Exec.CallID, "context of "+c.Exec.CallID))
		return d, err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestScenario23_CancelWhileFirstTwoRun(t *testing.T) {
	t.Parallel()
	h := newRegHarness(t, Config{MaxParallelToolCallsFunc: func() int { return 2 }})
	addContextListener(t, h)
	ids := []string{"p1", "p2", "p3", "p4"}
	h.gateAll(ids...)
	ctx, cancel := context.WithCancel(context.Background())
	done := h.start(ctx, ids...)
	h.awaitStarted("p1", "p2")
	cancel() // the bodies honour their signal and settle
	r := <-done
	if r.err != nil || !r.out.Aborted {
		t.Fatalf("RunStep = %+v", r)
	}
	want := []string{"call:p1", "call:p2", "result:p1", "ctx:p1", "result:p2", "ctx:p2", "call:p3", "result:p3", "call:p4", "result:p4"}
	if got := h.tr.only("call", "result", "ctx"); !slices.Equal(got, want) {
		t.Errorf("log = %v\nwant  %v", got, want)
	}
	for i, res := range r.out.Results {
		wantCode, synthetic := fault.CodeAborted, false
		if i >= 2 {
			wantCode, synthetic = fault.CodeAbortedBeforeDispatch, true
		}
		if codeOf(res.Result) != wantCode || res.Synthetic != synthetic {
			t.Errorf("%s: code %q synthetic %v, want %q %v", res.Call.ID, codeOf(res.Result), res.Synthetic, wantCode, synthetic)
		}
	}
	if got := h.tr.only("body"); !slices.Equal(got, []string{"body:p1", "body:p2"}) && !slices.Equal(got, []string{"body:p2", "body:p1"}) {
		t.Errorf("bodies = %v", got)
	}
}

func TestScenario24_CancelBeforeToolsStart(t *testing.T) {
	t.Parallel()
	h := newRegHarness(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // as a listener on assistant/message would
	r := <-h.start(ctx, "p1", "x", "p2")
	if r.err != nil || !r.out.Aborted {
		t.Fatalf("RunStep = %+v", r)
	}
	want := []string{"call:p1", "result:p1", "call:x", "result:x", "call:p2", "result:p2"}
	if got := h.tr.only("call", "result"); !slices.Equal(got, want) {
		t.Errorf("log = %v", got)
	}
	for _, res := range r.out.Results {
		if !res.Synthetic || codeOf(res.Result) != fault.CodeAbortedBeforeDispatch {
			t.Errorf("%s: %+v", res.Call.ID, res.Result)
		}
	}
	if got := h.tr.only("body"); len(got) != 0 || h.preCalls != 0 {
		t.Errorf("bodies %v, pre-execute calls %d; want none", got, h.preCalls)
	}
}

func TestScenario25_TwoCallsWithContexts(t *testing.T) {
	t.Parallel()
	h := newRegHarness(t, Config{})
	addContextListener(t, h)
	h.gateAll("p1", "p2")
	done := h.start(context.Background(), "p1", "p2")
	h.awaitStarted("p1", "p2")
	h.release("p2")
	h.release("p1")
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	// Each handoff follows its own tool/result, in model order; the agent loop turns them into
	// user/message events only at the next step, after both results (LOOP-6).
	want := []string{"result:p1", "ctx:p1", "result:p2", "ctx:p2"}
	if got := h.tr.only("result", "ctx"); !slices.Equal(got, want) {
		t.Errorf("log = %v, want %v", got, want)
	}
	for _, id := range []string{"p1", "p2"} {
		if msgs := h.em.contexts[id]; len(msgs) != 1 || msgs[0].ID != "ctx-"+id {
			t.Errorf("contexts of %s = %+v", id, msgs)
		}
	}
}
