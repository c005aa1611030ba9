package scheduler

import (
	"context"
	"fmt"
	"runtime/debug"

	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/telemetry"
)

// slot is one started call. While the call is dispatched, the dispatch goroutine owns settled,
// result and broken; it writes them and then sends the slot on settledCh, after which the lane
// owns every field again. All other fields are lane-owned throughout.
type slot struct {
	// ctx is the step signal carrying the call's execute_tool span (the step signal itself when
	// tracing is off): every pipeline stage of the call runs with it, so the spans of what the
	// tool does (a run_code program's sub-calls) nest under the call's.
	ctx     context.Context
	span    oteltrace.Span
	call    Call
	callSeq int64
	prep    *registry.Prepared
	settled *registry.Settled // set by Dispatch
	result  *registry.Result  // a result that skips Finalize/Finish (a contained panic)
	broken  bool              // Dispatch returned nil (set by the dispatch goroutine)
	done    bool              // ready to commit (lane-owned)
	dead    bool              // never got a durable tool/call or a dispatch; commits nothing
	// wait is eventlog.ParkApproval or eventlog.ParkClient for a call that waits outside the
	// server (never done: the step parks before it commits); "" otherwise.
	wait string
}

// start starts call i (SCHED-3): `tool/call`, the prepare stage, then, for a dispatched call, a
// flush and the dispatch goroutine. The next call is not touched before prepare has resolved.
func (r *run) start(i int) {
	if sl := r.begin(i); sl != nil {
		r.pending = append(r.pending, sl)
		r.launch()
	}
}

// startGrouped is start for a call of a parallel pool: the dispatch waits in r.pending for launch,
// which flushes once for every pending call.
func (r *run) startGrouped(i int) {
	if sl := r.begin(i); sl != nil {
		r.pending = append(r.pending, sl)
	}
}

// launch makes the pending calls' events durable with one flush, then starts their dispatch
// goroutines in model order. When the flush fails, none of them is dispatched (SCHED-7).
func (r *run) launch() {
	if len(r.pending) == 0 {
		return
	}
	pending := r.pending
	r.pending = r.pending[:0:0]
	var err error
	if l, ok := r.em.(Launcher); ok {
		calls := make([]Call, len(pending))
		for i, sl := range pending {
			calls[i] = r.calls[sl.call.Index]
		}
		err = l.Launch(r.emCtx, calls)
	} else {
		err = r.em.Flush(r.emCtx)
	}
	if !r.emit(err) {
		for _, sl := range pending {
			sl.dead, sl.done = true, true // no new dispatches after a failure (SCHED-7)
		}
		return
	}
	for _, sl := range pending {
		r.inflight++
		go r.dispatch(sl)
	}
}

// begin writes call i's `tool/call` and runs its prepare stage. It returns the slot when the call
// is to be dispatched (not yet launched, done false), nil when it already has its result or no
// durable tool/call.
func (r *run) begin(i int) *slot {
	sl := &slot{call: r.calls[i], done: true}
	r.slots[i] = sl
	r.next = i + 1
	if r.committed(i) {
		sl.dead = true // a resumed step's call whose result is in the log
		return nil
	}
	seq, err := r.em.ToolCall(r.emCtx, sl.call)
	if !r.emit(err) {
		sl.dead = true
		return nil
	}
	sl.callSeq = seq
	sl.ctx, sl.span = telemetry.StartTool(r.ctx, sl.call.ID)
	pctx := sl.ctx
	if r.groupCtx != nil {
		pctx = r.groupCtx(pctx)
	}
	sl.prep, sl.result = r.prepare(pctx, sl.call, r.input(i))
	switch {
	case sl.result != nil:
		return nil
	case sl.prep.Kind == registry.PrepPark:
		// The ask is committed; nothing after it starts (SCHED-3) and the step parks.
		sl.wait, sl.done, r.parking = eventlog.ParkApproval, false, true
		r.waiting++
		return nil
	case r.step.Park && sl.prep.AwaitsClient():
		// The client runs it: its tool/call is all the server writes before the park.
		sl.wait, sl.done = eventlog.ParkClient, false
		r.waiting++
		return nil
	case sl.prep.Kind != registry.PrepDispatch:
		return nil
	}
	sl.done = false
	return sl
}

// prepare runs the prepare stage of c, containing a panic or a nil Prepared as a failure result.
func (r *run) prepare(ctx context.Context, c Call, in registry.Input) (p *registry.Prepared, res *registry.Result) {
	defer func() {
		if v := recover(); v != nil {
			r.logPanic("prepare", c, v, debug.Stack())
			p, res = nil, panicResult(v)
		}
	}()
	p = r.s.pipe.Prepare(ctx, in)
	if p == nil {
		r.fail(fmt.Errorf("scheduler: %w: Prepare returned nil for call %q", ErrPipelineContract, c.ID))
		return nil, contractResult("prepare")
	}
	return p, nil
}

// dispatch runs on its own goroutine: the body stage of one call. It always reports back on
// settledCh, whatever happens, so the lane never waits forever (SCHED-8).
func (r *run) dispatch(sl *slot) {
	defer func() { r.settledCh <- sl }()
	defer func() {
		if v := recover(); v != nil {
			r.logPanic("dispatch", sl.call, v, debug.Stack())
			sl.settled, sl.result = nil, panicResult(v)
		}
	}()
	sl.settled = r.s.pipe.Dispatch(sl.ctx, sl.prep)
	if sl.settled == nil {
		sl.broken, sl.result = true, contractResult("dispatch")
	}
}

// commit finalizes or finishes a settled call, emits its `tool/result` and hands over its
// contexts (SCHED-4). A dead slot commits nothing.
func (r *run) commit(sl *slot) {
	if sl.dead {
		if sl.span != nil {
			telemetry.EndTool(sl.span, sl.call.Name, true, "NOT_DISPATCHED")
		}
		return
	}
	res := sl.result
	if res == nil {
		res = r.finish(sl)
	}
	if sl.span != nil {
		code := ""
		if info := res.ErrorInfo(); info != nil {
			code = info.Code
		}
		telemetry.EndTool(sl.span, sl.call.Name, res.IsError, code)
	}
	if sl.broken {
		r.fail(fmt.Errorf("scheduler: %w: Dispatch returned nil for call %q", ErrPipelineContract, sl.call.ID))
	}
	if !res.IsError && res.ConcludesTurn {
		r.out.ConcludesTurn = true
	}
	r.out.Results = append(r.out.Results, CallResult{Call: sl.call, CallSeq: sl.callSeq, Result: res})
	if r.emDead || !r.emit(r.em.ToolResult(r.emCtx, sl.call, sl.callSeq, res)) {
		return
	}
	if len(res.AdditionalContexts) > 0 {
		r.emit(r.em.Contexts(r.emCtx, sl.call, res.AdditionalContexts))
	}
}

// finish runs the finalize stage of a dispatched call, or the finish stage of one that was not
// dispatched, containing a panic or a nil Result as a failure result.
func (r *run) finish(sl *slot) (res *registry.Result) {
	stage := "finish"
	if sl.settled != nil {
		stage = "finalize"
	}
	defer func() {
		if v := recover(); v != nil {
			r.logPanic(stage, sl.call, v, debug.Stack())
			res = panicResult(v)
		}
	}()
	if sl.settled != nil {
		res = r.s.pipe.Finalize(sl.ctx, sl.settled)
	} else {
		res = r.s.pipe.Finish(sl.ctx, sl.prep)
	}
	if res == nil {
		r.fail(fmt.Errorf("scheduler: %w: %s returned nil for call %q", ErrPipelineContract, stage, sl.call.ID))
		res = contractResult(stage)
	}
	return res
}

// logPanic logs a panic recovered from a pipeline stage, with its stack.
func (r *run) logPanic(stage string, c Call, v any, stack []byte) {
	r.s.cfg.Logger.ErrorContext(r.ctx, "scheduler: pipeline panic contained",
		"stage", stage, "callId", c.ID, "tool", c.Name, "panic", fmt.Sprint(v), "stack", string(stack))
}

// panicResult is the failure result of a contained panic: `Error: panic: <value>`, no info (a
// panic is not a HarnessError).
func panicResult(v any) *registry.Result {
	return failureResult(fmt.Sprintf("panic: %v", v))
}

// contractResult is the failure result standing in for a nil pipeline value; the nil itself is
// also reported as an internal failure.
func contractResult(stage string) *registry.Result {
	return failureResult(fmt.Sprintf("internal error: %s returned no result", stage))
}

// failureResult is a failure with the standard `Error: <message>` content (RES-3).
func failureResult(msg string) *registry.Result {
	return &registry.Result{
		IsError: true,
		Content: []llm.Block{llm.TextBlock("Error: " + msg)},
		Error:   &registry.ToolError{Message: msg},
	}
}
