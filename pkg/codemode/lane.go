package codemode

import (
	"fmt"
	"runtime/debug"
	"time"

	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/telemetry"
)

// lane is a run's sub-call scheduler (CODE-6), the native rules (SCHED-1..6) over calls that
// arrive while it runs. Its goroutine is the ordered lane: classification, the prepare stage,
// the finalize stage and every commit happen on it, one at a time, in submission order; only
// the dispatch stage (wrappers and body) runs on a goroutine of its own. A queued call starts
// when the one before it has started and
//   - it is parallel, no exclusive call is uncommitted, and fewer than the limit are in flight
//     (dispatched and not settled); or
//   - it is exclusive and every started call has committed; it then runs alone, and nothing
//     starts before it has committed.
//
// Once the run signal is cancelled no call starts (SCHED-6); started calls are drained and
// committed. The lane ends when the bridge is closed and every started call has committed.
//
// The dispatch goroutines are the run's workers: a worker whose call has settled takes the next
// call to dispatch, so that a call does not pay for a fresh goroutine and for growing its stack
// (the pipeline's JSON decoding grows it past the initial size: that growth was a seventh of a
// sub-call's CPU time). A worker is idle or runs one call; there is one for every call in flight
// at once, at most the limit, and they end with the lane.
type lane struct {
	b        *bridge
	started  []*subCall // started, not committed, in submission order
	inflight int
	idle     []*worker // workers waiting for a call
}

// worker is a dispatch goroutine; calls reach it on next, which holds the one call it is given
// at a time.
type worker struct{ next chan *subCall }

func (l *lane) run() {
	defer close(l.b.laneDone)
	defer l.stopWorkers()
	for {
		l.commitReady()
		l.startReady()
		l.commitReady()
		if len(l.started) == 0 && l.b.idle() {
			return
		}
		select {
		case c := <-l.b.settled:
			l.settle(c)
			l.collect()
		case <-l.b.wake:
		}
	}
}

func (l *lane) settle(c *subCall) {
	c.done = true
	l.inflight--
	if c.worker != nil {
		l.idle = append(l.idle, c.worker)
		c.worker = nil
	}
}

// stopWorkers ends the idle workers: when the lane ends, every worker is idle.
func (l *lane) stopWorkers() {
	for _, w := range l.idle {
		close(w.next)
	}
	l.idle = nil
}

// collect takes every dispatch that has settled by now, without waiting.
func (l *lane) collect() {
	for {
		select {
		case c := <-l.b.settled:
			l.settle(c)
		default:
			return
		}
	}
}

// startReady starts queued calls while the rules allow.
func (l *lane) startReady() {
	for l.b.ctx.Err() == nil {
		c := l.b.peek()
		if c == nil {
			return
		}
		if n := len(l.started); n > 0 && l.started[n-1].mode == registry.Exclusive {
			return
		}
		mode := l.classify(c)
		if mode == registry.Exclusive && len(l.started) > 0 || mode == registry.Parallel && l.inflight >= l.b.limit {
			return
		}
		if !l.b.pop(c) {
			return
		}
		c.mode = mode
		l.start(c)
	}
}

// classify re-classifies c just before it would start (REG-9); a panic means exclusive.
func (l *lane) classify(c *subCall) (m registry.Mode) {
	defer func() {
		if recover() != nil {
			m = registry.Exclusive
		}
	}()
	return l.b.reg.ExecutionMode(c.in)
}

// start logs c's start and runs its prepare stage; a call to dispatch gets its goroutine.
func (l *lane) start(c *subCall) {
	c.ctx, c.span = telemetry.StartTool(l.b.ctx, c.in.CallID)
	if l.b.metrics != nil {
		c.started = time.Now()
	}
	l.b.logStart(c)
	l.started = append(l.started, c)
	l.prepare(c)
	if c.panicked != nil || c.prep.Kind != registry.PrepDispatch {
		c.done = true
		return
	}
	l.inflight++
	if n := len(l.idle); n > 0 {
		w := l.idle[n-1]
		l.idle = l.idle[:n-1]
		c.worker = w
		w.next <- c
		return
	}
	c.worker = &worker{next: make(chan *subCall, 1)}
	go l.work(c.worker, c)
}

// work is a worker's goroutine: it dispatches c, then the calls it is given until the lane ends.
func (l *lane) work(w *worker, c *subCall) {
	for ok := true; ok; c, ok = <-w.next {
		if !l.dispatch(c) {
			return
		}
	}
}

func (l *lane) prepare(c *subCall) {
	defer func() {
		if v := recover(); v != nil {
			c.panicked = l.contained("prepare", c, v)
		}
	}()
	c.prep = l.b.reg.Prepare(c.ctx, c.in)
}

// dispatch runs c's dispatch stage on a worker and always reports back. It reports whether the
// worker goes on: not when the stage ended its goroutine (runtime.Goexit), which then takes no
// more calls.
func (l *lane) dispatch(c *subCall) (goesOn bool) {
	defer func() {
		if !goesOn {
			c.worker = nil
		}
		l.b.settled <- c
	}()
	defer func() {
		if v := recover(); v != nil {
			c.panicked = l.contained("dispatch", c, v)
			goesOn = true
		}
	}()
	c.set = l.b.reg.Dispatch(c.ctx, c.prep)
	return true
}

// commitReady commits every settled call at the head, in submission order.
func (l *lane) commitReady() {
	for len(l.started) > 0 && l.started[0].done {
		c := l.started[0]
		l.started = l.started[1:]
		res := l.finish(c)
		code := ""
		if info := res.ErrorInfo(); info != nil {
			code = info.Code
		}
		telemetry.EndTool(c.span, c.in.Name, res.IsError, code)
		if l.b.metrics != nil {
			if res.IsError && code == "" {
				code = "TOOL_ERROR"
			}
			if !res.IsError {
				code = ""
			}
			l.b.metrics.ToolCall(c.in.Name, code, time.Since(c.started))
		}
		l.b.commit(c, res)
	}
}

// finish runs the finalize (or finish) stage of c.
func (l *lane) finish(c *subCall) (res *registry.Result) {
	if c.panicked != nil {
		return c.panicked
	}
	defer func() {
		if v := recover(); v != nil {
			res = l.contained("finalize", c, v)
		}
	}()
	if c.set != nil {
		return l.b.reg.Finalize(c.ctx, c.set)
	}
	return l.b.reg.Finish(c.ctx, c.prep)
}

// contained logs a panic of a pipeline stage and returns the failure result standing for it.
func (l *lane) contained(stage string, c *subCall, v any) *registry.Result {
	ctx := c.ctx
	if ctx == nil {
		ctx = l.b.ctx
	}
	l.b.logger().ErrorContext(ctx, "codemode: sub-call pipeline panic contained", "stage", stage, "subCallId", c.in.CallID,
		"tool", c.in.Name, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	msg := fmt.Sprintf("panic: %v", v)
	return &registry.Result{IsError: true, Error: &registry.ToolError{Message: msg},
		Content: []llm.Block{llm.TextBlock("Error: " + msg)}}
}
