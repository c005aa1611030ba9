package scheduler

import (
	"context"
	"slices"
	"testing"

	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
)

// before fails the test unless a comes before b in the trace (both present).
func before(t *testing.T, tr *trace, a, b string) {
	t.Helper()
	i, j := tr.index(a), tr.index(b)
	if i < 0 || j < 0 || i > j {
		t.Errorf("want %s before %s: %v", a, b, tr.all())
	}
}

func TestSCHED3_CallThenPrepareThenFlushThenDispatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	if _, err := h.run(context.Background(), "c1", "c2"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c1", "c2"} {
		before(t, h.tr, "call:"+id, "prep:"+id)
		before(t, h.tr, "prep:"+id, "body:"+id)
	}
	// The harness also checks, inside every Dispatch, that the call's tool/call was flushed.
	if got := h.tr.all(); got[len(got)-1] != "flush" {
		t.Errorf("the step does not end with a flush: %v", got)
	}
}

func TestSCHED3_NextCallWaitsForPrepare(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	h.set("c1", spec{prepGated: true}) // an approval that has not been answered
	done := h.start(context.Background(), "c1", "c2")
	// c1's prepare is blocked; nothing of c2 may happen. Release it and check the order.
	h.pipe.releasePrep("c1")
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
	before(t, h.tr, "prepared:c1", "mode:c2")
	before(t, h.tr, "prepared:c1", "call:c2")
}

func TestSCHED3_DispatchLaunchedBeforeNextCall(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	h.set("c1", spec{gated: true})
	h.set("c2", spec{gated: true})
	done := h.start(context.Background(), "c1", "c2")
	h.awaitStarted("c1", "c2") // c1's body runs while c2 is prepared and dispatched
	h.pipe.release("c1")
	h.pipe.release("c2")
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
}

func TestSCHED4_CommitsInModelOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	ids := []string{"c1", "c2", "c3"}
	for _, id := range ids {
		h.set(id, spec{gated: true})
	}
	done := h.start(context.Background(), ids...)
	h.awaitStarted(ids...)
	for _, id := range []string{"c3", "c2", "c1"} { // settle in reverse order
		h.pipe.release(id)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := h.tr.only("result"); !slices.Equal(got, []string{"result:c1", "result:c2", "result:c3"}) {
		t.Errorf("results = %v", got)
	}
	if got := resultIDs(r.out); !slices.Equal(got, ids) {
		t.Errorf("outcome results = %v", got)
	}
}

func TestSCHED4_ResultCitesItsCallSeq(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	out, err := h.run(context.Background(), "c1", "c2", "c3")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out.Results {
		if h.em.cited[r.Call.ID] != h.em.callSeq[r.Call.ID] || r.CallSeq != h.em.callSeq[r.Call.ID] {
			t.Errorf("%s cites %d, outcome %d; its tool/call is %d", r.Call.ID, h.em.cited[r.Call.ID], r.CallSeq, h.em.callSeq[r.Call.ID])
		}
	}
}

func TestSCHED4_ContextsHandedOverAfterEachResult(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	m1 := llm.NewUserMessage("m1", "context one")
	h.set("c1", spec{contexts: []llm.Message{m1}})
	h.set("c2", spec{})
	if _, err := h.run(context.Background(), "c1", "c2"); err != nil {
		t.Fatal(err)
	}
	got := h.tr.only("result", "ctx")
	if want := []string{"result:c1", "ctx:c1", "result:c2"}; !slices.Equal(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
	if msgs := h.em.contexts["c1"]; len(msgs) != 1 || msgs[0].ID != "m1" {
		t.Errorf("contexts = %+v", msgs)
	}
}

func TestSCHED4_PreparedResultsGoThroughFinish(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	h.set("deny", spec{kind: registry.PrepPostResult})
	h.set("bad", spec{kind: registry.PrepFinalResult})
	out, err := h.run(context.Background(), "deny", "ok", "bad")
	if err != nil {
		t.Fatal(err)
	}
	if got := h.tr.only("body"); !slices.Equal(got, []string{"body:ok"}) {
		t.Errorf("bodies = %v, want only ok", got)
	}
	if got := h.tr.only("finish", "final"); !slices.Equal(got, []string{"finish:deny", "final:ok", "finish:bad"}) {
		t.Errorf("stages = %v", got)
	}
	if msg := out.Results[0].Result.Error.Message; msg != "denied deny" {
		t.Errorf("deny result = %q", msg)
	}
}

func TestSCHED4_PostExecuteNeverOverlapsPreExecute(t *testing.T) {
	t.Parallel()
	// The fake fails the test if two lane stages overlap; run a step where bodies settle while
	// later calls are being prepared.
	h := newHarness(t, Config{MaxParallelToolCallsFunc: func() int { return 3 }})
	ids := []string{"c1", "c2", "c3", "c4", "c5", "c6"}
	for _, id := range ids {
		h.set(id, spec{contexts: []llm.Message{llm.NewUserMessage("m-"+id, id)}})
	}
	if _, err := h.run(context.Background(), ids...); err != nil {
		t.Fatal(err)
	}
	if got := h.tr.only("result"); len(got) != len(ids) {
		t.Errorf("results = %v", got)
	}
}

func TestSCHED4_ConcludesTurnReported(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	out, err := h.run(context.Background(), "c1", "c2")
	if err != nil || out.ConcludesTurn {
		t.Fatalf("no concluding result: out %+v err %v", out, err)
	}
	h = newHarness(t, Config{})
	h.set("c2", spec{concludes: true})
	if out, err = h.run(context.Background(), "c1", "c2"); err != nil || !out.ConcludesTurn {
		t.Fatalf("concluding c2: ConcludesTurn = %v, err %v", out.ConcludesTurn, err)
	}
}

func TestSCHED5_LogInterleavesCallsAndResults(t *testing.T) {
	t.Parallel()
	// Four parallel calls with a cap of 2, bodies settling in model order: the log of
	// reference-logs/tools-4.jsonl, call1 call2 result1 call3 result2 call4 result3 result4.
	h := newHarness(t, Config{MaxParallelToolCallsFunc: func() int { return 2 }})
	ids := []string{"c1", "c2", "c3", "c4"}
	for _, id := range ids {
		h.set(id, spec{gated: true})
	}
	done := h.start(context.Background(), ids...)
	for _, id := range ids {
		h.awaitStarted(id)
		h.awaitWait()
		h.pipe.release(id)
	}
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
	want := []string{"call:c1", "call:c2", "result:c1", "call:c3", "result:c2", "call:c4", "result:c3", "result:c4"}
	if got := h.tr.only("call", "result"); !slices.Equal(got, want) {
		t.Errorf("log = %v\nwant  %v", got, want)
	}
}
