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
// arrive while it runs. The lane is held by one goroutine at a time, and only its holder
// classifies, runs the prepare stage, the finalize stage and every commit: one at a time, in
// submission order. The dispatch stage (wrappers and body) runs on a goroutine that does not
// hold the lane, so that it never holds up the others. A queued call starts when the one before
// it has started and
//   - it is parallel, no exclusive call is uncommitted, and fewer than the limit are in flight
//     (dispatched and not settled); or
//   - it is exclusive and every started call has committed; it then runs alone, and nothing
//     starts before it has committed.
//
// Once the run signal is cancelled no call starts (SCHED-6); started calls are drained and
// committed. The lane ends when the bridge is closed and every started call has committed.
//
// There is no goroutine of the lane's own. The lane is taken when there is work for it: by the
// engine's goroutine when a step of the program that submitted calls ends (bridge.stepped), by
// a worker when the step goes on computing or when its own dispatch settled; the holder runs the
// work until none is left and lets the lane go. A holder that started a call to dispatch as the
// last thing it did holding the lane dispatches it itself (the engine's goroutine only when the
// call is alone in flight and the program waits for it); a call started before other lane work
// goes to an idle worker at once. So a call of a sequential program crosses no goroutine at all:
// every hand-off between goroutines wakes a thread, and the hand-offs through a lane goroutine
// and a dispatch goroutine were half of a sub-call's time. Workers are reused, so that a call
// does not pay for a fresh goroutine and for growing its stack (the pipeline's JSON decoding
// grows it past the initial size). They end with the lane.
type lane struct {
	b *bridge

	// Owned by the lane's holder.
	started  []*subCall // started, not committed, in submission order
	inflight int

	// Guarded by b.mu.
	held    bool       // a goroutine holds the lane, or is given it
	dirty   bool       // work arrived for the lane while it was held
	settled []*subCall // dispatches that settled while the lane was held
	idle    []*worker  // workers waiting for work
	ended   bool
}

// worker is a goroutine of the lane. Work reaches it on next, which holds one item at a time: a
// call to dispatch, or nil, which gives it the lane.
type worker struct{ next chan *subCall }

// kick makes sure the lane's work gets done: its holder goes on with it, or a worker takes the
// lane. b.mu is held.
func (l *lane) kick() {
	if l.held {
		l.dirty = true
		return
	}
	l.held = true
	l.give(nil)
}

// give hands c to an idle worker, or to a new one: nil gives it the lane (held is set). b.mu is
// held.
func (l *lane) give(c *subCall) {
	if n := len(l.idle); n > 0 {
		w := l.idle[n-1]
		l.idle = l.idle[:n-1]
		w.next <- c
		return
	}
	go l.work(&worker{next: make(chan *subCall, 1)}, c)
}

// handOff gives the call the holder kept to dispatch itself to another worker: the holder has
// more lane work to do first.
func (l *lane) handOff(mine **subCall) {
	if *mine != nil {
		l.b.mu.Lock()
		l.give(*mine)
		l.b.mu.Unlock()
		*mine = nil
	}
}

// work is a worker's goroutine: c is its first item.
func (l *lane) work(w *worker, c *subCall) {
	for {
		if c == nil { // given the lane
			c, _ = l.drive(true)
		} else if l.dispatch(c) {
			c, _ = l.settle(c)
		} else {
			return // the dispatch stage ended the goroutine
		}
		if c != nil {
			continue
		}
		l.b.mu.Lock()
		if l.ended {
			l.b.mu.Unlock()
			return
		}
		l.idle = append(l.idle, w)
		l.b.mu.Unlock()
		var ok bool
		if c, ok = <-w.next; !ok {
			return
		}
	}
}

// settle reports the dispatch of c settled: to the holder of the lane, or by taking the lane.
// It returns the call the caller is to dispatch next, if any, as drive does.
func (l *lane) settle(c *subCall) (*subCall, bool) {
	l.b.mu.Lock()
	if l.held {
		l.settled = append(l.settled, c)
		l.b.mu.Unlock()
		return nil, false
	}
	l.held = true
	l.b.mu.Unlock()
	l.settleHeld(c)
	return l.drive(true)
}

// settleHeld marks c settled; the caller holds the lane.
func (l *lane) settleHeld(c *subCall) {
	c.done = true
	l.inflight--
}

// drive runs the lane's work, holding the lane, until there is none left, and lets the lane go.
// It returns the call the caller is to dispatch itself (canDispatch: the caller can), the last
// one it started, and whether that call is alone in flight.
func (l *lane) drive(canDispatch bool) (mine *subCall, alone bool) {
	for {
		l.commitReady(&mine)
		l.startReady(&mine)
		l.commitReady(&mine)
		if !canDispatch {
			l.handOff(&mine)
		}
		l.b.mu.Lock()
		if l.dirty || len(l.settled) > 0 {
			l.dirty = false
			sts := l.settled
			l.settled = nil
			l.b.mu.Unlock()
			for _, c := range sts {
				l.settleHeld(c)
			}
			continue
		}
		alone = mine != nil && l.inflight == 1
		l.held = false
		l.endIfDone()
		l.b.mu.Unlock()
		return mine, alone
	}
}

// endIfDone ends the lane when the bridge is closed and every started call has committed: the
// idle workers end, and close returns. b.mu is held, and the lane is not.
func (l *lane) endIfDone() {
	if l.ended || !l.b.closed || len(l.b.queue) > 0 || len(l.started) > 0 {
		return
	}
	l.ended = true
	for _, w := range l.idle {
		close(w.next)
	}
	l.idle = nil
	close(l.b.laneDone)
}

// startReady starts queued calls while the rules allow. The last call it starts to dispatch is
// kept in mine, for the caller to dispatch; a call kept before goes to another worker first.
func (l *lane) startReady(mine **subCall) {
	for l.b.ctx.Err() == nil {
		c := l.b.peek()
		if c == nil {
			return
		}
		if n := len(l.started); n > 0 && l.started[n-1].mode == registry.Exclusive {
			return
		}
		l.handOff(mine) // classification and the prepare stage may take their time
		mode := l.classify(c)
		if mode == registry.Exclusive && len(l.started) > 0 || mode == registry.Parallel && l.inflight >= l.b.limit {
			return
		}
		if !l.b.pop(c) {
			return
		}
		c.mode = mode
		if l.start(c) {
			*mine = c
		}
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

// start logs c's start and runs its prepare stage. It reports whether c is to be dispatched.
func (l *lane) start(c *subCall) bool {
	c.ctx, c.span = telemetry.StartTool(l.b.ctx, c.in.CallID)
	if l.b.metrics != nil {
		c.started = time.Now()
	}
	l.b.logStart(c)
	l.started = append(l.started, c)
	l.prepare(c)
	if c.panicked != nil || c.prep.Kind != registry.PrepDispatch {
		c.done = true
		return false
	}
	l.inflight++
	return true
}

func (l *lane) prepare(c *subCall) {
	defer func() {
		if v := recover(); v != nil {
			c.panicked = l.contained("prepare", c, v)
		}
	}()
	c.prep = l.b.reg.Prepare(c.ctx, c.in)
}

// dispatch runs c's dispatch stage on a worker. It reports whether the worker goes on: not when
// the stage ended its goroutine (runtime.Goexit), which then reports the settlement on its way
// out, and a worker that took the lane for it dispatches nothing.
func (l *lane) dispatch(c *subCall) (goesOn bool) {
	defer func() {
		if !goesOn {
			l.b.mu.Lock()
			if l.held {
				l.settled = append(l.settled, c)
				l.b.mu.Unlock()
				return
			}
			l.held = true
			l.b.mu.Unlock()
			l.settleHeld(c)
			l.drive(false)
		}
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

// commitReady commits every settled call at the head, in submission order. A call kept in mine
// goes to another worker first.
func (l *lane) commitReady(mine **subCall) {
	for len(l.started) > 0 && l.started[0].done {
		l.handOff(mine)
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
