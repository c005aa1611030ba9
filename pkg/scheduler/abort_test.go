package scheduler

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
)

func TestSCHED6_AbortDrainsStartedAndSynthesizesTheRest(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	h.set("x", spec{exclusive: true, gated: true})
	done := h.start(ctx, "x", "p1", "y", "p2")
	h.awaitStarted("x")
	cancel()
	h.pipe.release("x")
	r := <-done
	if r.err != nil || !r.out.Aborted {
		t.Fatalf("RunStep = %+v", r)
	}
	want := []string{"call:x", "result:x", "call:p1", "result:p1", "call:y", "result:y", "call:p2", "result:p2"}
	if got := h.tr.only("call", "result"); !slices.Equal(got, want) {
		t.Errorf("log = %v\nwant  %v", got, want)
	}
	if got := h.tr.only("body", "prep", "mode"); !slices.Equal(got, []string{"mode:x", "prep:x", "body:x"}) {
		t.Errorf("later calls reached the pipeline: %v", got)
	}
	for _, res := range r.out.Results[1:] {
		if !res.Synthetic || codeOf(res.Result) != fault.CodeAbortedBeforeDispatch ||
			res.Result.Content[0].Text != "Error: tool call aborted before dispatch" {
			t.Errorf("%s: %+v", res.Call.ID, res.Result)
		}
		if h.em.cited[res.Call.ID] != h.em.callSeq[res.Call.ID] {
			t.Errorf("synthetic result of %s does not cite its tool/call", res.Call.ID)
		}
	}
}

func TestSCHED6_DrainedContextsAreHandedOver(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	h.set("c1", spec{gated: true, contexts: []llm.Message{llm.NewUserMessage("m1", "parked")}})
	done := h.start(ctx, "c1", "c2")
	h.awaitStarted("c1", "c2")
	cancel()
	h.pipe.release("c1")
	r := <-done
	if r.err != nil || !r.out.Aborted {
		t.Fatalf("RunStep = %+v", r)
	}
	if got := h.tr.only("result", "ctx"); !slices.Equal(got, []string{"result:c1", "ctx:c1", "result:c2"}) {
		t.Errorf("events = %v", got)
	}
}

func TestSCHED6_AbortObservedAfterLastCommit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	h.set("c1", spec{gated: true})
	done := h.start(ctx, "c1")
	h.awaitStarted("c1")
	cancel()
	h.pipe.release("c1")
	r := <-done
	if !r.out.Aborted || len(r.out.Results) != 1 || r.out.Results[0].Synthetic {
		t.Fatalf("outcome = %+v", r.out)
	}
}

func TestSCHED7_EmitterFailureDrainsAndReturnsFirstError(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{MaxParallelToolCallsFunc: func() int { return 2 }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.set("c1", spec{gated: true})
	h.set("c2", spec{gated: true})
	h.em.failOn = "result:c1"
	done := h.start(ctx, "c1", "c2", "c3", "c4")
	h.awaitStarted("c1", "c2")
	h.awaitWait()
	h.pipe.release("c1")
	h.awaitWait() // result:c1 failed; the lane now only drains c2
	calls := h.em.emitterCalls()
	cancel() // even an abort now creates no synthetic results
	h.pipe.release("c2")
	r := <-done
	if !errors.Is(r.err, errEmit) {
		t.Fatalf("err = %v, want the emitter's error", r.err)
	}
	if got := h.em.emitterCalls(); got != calls {
		t.Errorf("emitter called %d more times after its failure", got-calls)
	}
	if h.tr.index("settle:c2") < 0 {
		t.Error("started body c2 was abandoned")
	}
	for _, res := range r.out.Results {
		if res.Synthetic {
			t.Errorf("synthetic result after an internal failure: %s", res.Call.ID)
		}
	}
	if h.tr.index("call:c3") >= 0 || h.tr.index("prep:c3") >= 0 {
		t.Errorf("c3 started after the failure: %v", h.tr.all())
	}
	if h.tr.index("final:c2") < 0 {
		t.Errorf("drained c2 was not finalized: %v", h.tr.all())
	}
}

func TestSCHED7_FlushFailureStartsNoDispatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	h.em.failOn = "flush"
	out, err := h.run(context.Background(), "c1", "c2")
	if !errors.Is(err, errEmit) {
		t.Fatalf("err = %v", err)
	}
	// The parallel pool's calls are started together and launched after one flush: both
	// tool/calls are recorded, no body runs.
	if got := h.tr.only("body", "call"); !slices.Equal(got, []string{"call:c1", "call:c2"}) {
		t.Errorf("events = %v", got)
	}
	if len(out.Results) != 0 {
		t.Errorf("results = %v", resultIDs(out))
	}
}

func TestSCHED7_NilFromPipelineIsInternalFailure(t *testing.T) {
	t.Parallel()
	for _, stage := range []string{"prepare", "dispatch", "finalize"} {
		t.Run(stage, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{})
			h.set("c1", spec{nilAt: stage})
			_, err := h.run(context.Background(), "c1", "c2")
			if !errors.Is(err, ErrPipelineContract) {
				t.Fatalf("err = %v", err)
			}
			if h.tr.index("call:c2") >= 0 && stage == "prepare" {
				t.Errorf("c2 started after the failure: %v", h.tr.all())
			}
		})
	}
}

func TestSCHED8_StartedBodyNeverAbandoned(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	h.set("c1", spec{gated: true}) // ignores the signal until released
	done := h.start(ctx, "c1", "c2")
	h.awaitStarted("c1", "c2")
	cancel()
	h.awaitWait() // the lane waits for c1 even though the step is aborted
	select {
	case r := <-done:
		t.Fatalf("RunStep returned before the body settled: %+v", r)
	default:
	}
	h.pipe.release("c1")
	r := <-done
	if h.tr.index("settle:c1") < 0 || codeOf(r.out.Results[0].Result) != fault.CodeAborted {
		t.Errorf("c1 result = %+v, trace %v", r.out.Results[0].Result, h.tr.all())
	}
}

func TestSCHED8_PanicBecomesFailureResult(t *testing.T) {
	t.Parallel()
	for _, stage := range []string{"prepare", "dispatch", "finalize", "finish"} {
		t.Run(stage, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{})
			s := spec{panicAt: stage}
			if stage == "finish" {
				s.kind = registry.PrepPostResult
			}
			h.set("c1", s)
			out, err := h.run(context.Background(), "c1", "c2")
			if err != nil {
				t.Fatal(err)
			}
			res := out.Results[0].Result
			if !res.IsError || !strings.HasPrefix(res.Error.Message, "panic: ") ||
				res.Content[0].Text != "Error: "+res.Error.Message || res.Error.Info != nil {
				t.Errorf("result = %+v", res.Error)
			}
			if len(out.Results) != 2 || out.Results[1].Result.IsError {
				t.Errorf("c2 not run normally: %+v", out.Results)
			}
			logs := h.logs.String()
			if !strings.Contains(logs, "stage="+stage) || !strings.Contains(logs, "goroutine") {
				t.Errorf("panic not logged with its stack: %s", logs)
			}
		})
	}
}

func TestSCHED9_DispatchesRunConcurrently(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	ids := []string{"c1", "c2", "c3"}
	for _, id := range ids {
		h.set(id, spec{gated: true})
	}
	done := h.start(context.Background(), ids...)
	h.awaitStarted(ids...) // all three bodies (and their wrappers) are running at once
	for _, id := range ids {
		h.pipe.release(id)
	}
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
	if h.pipe.maxRunning != 3 {
		t.Errorf("max concurrent dispatches = %d", h.pipe.maxRunning)
	}
}
