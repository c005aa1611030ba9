package scheduler

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/telemetry"
)

// run is the state of one RunStep. Every field is owned by the lane goroutine; dispatch goroutines
// touch only their own slot's dispatch fields and hand the slot back over settledCh.
type run struct {
	s     *Scheduler
	ctx   context.Context // the step signal
	emCtx context.Context // ctx without its cancellation, for the emitter
	step  Step
	calls []Call
	em    Emitter

	inputs    []registry.Input // by call index; built on first use
	slots     []*slot          // by call index; nil until the call starts
	next      int              // index of the next call to start
	head      int              // commit cursor: index of the next call to commit
	inflight  int              // dispatched calls whose bodies have not settled
	settledCh chan *slot       // dispatch goroutines report here; capacity len(calls), never blocks

	pending []*slot // started calls of the pool waiting to be launched together

	// groupCtx is what Config.GroupFunc returned for the current group (nil: nothing), applied
	// to the ctx of each of its prepares (extension E5).
	groupCtx func(context.Context) context.Context

	// parking: a call's ask parked (registry.PrepPark), or the group that ended holds a client
	// call waiting for its result; no call starts after it (SCHED-3, SCHED-2: the next group
	// starts only once every call of this one has its result).
	parking bool
	// waiting counts the started calls that wait outside the server (slot.wait set).
	waiting int

	out    Outcome
	err    error // first internal failure (SCHED-7)
	emDead bool  // the emitter failed; call it no more
}

func newRun(s *Scheduler, ctx context.Context, step Step, calls []Call, em Emitter) *run {
	r := &run{
		s:         s,
		ctx:       ctx,
		emCtx:     context.WithoutCancel(ctx),
		step:      step,
		calls:     make([]Call, len(calls)),
		em:        em,
		inputs:    make([]registry.Input, len(calls)),
		slots:     make([]*slot, len(calls)),
		settledCh: make(chan *slot, len(calls)),
	}
	for i, c := range calls {
		c.Index = i
		r.calls[i] = c
	}
	r.out.Results = make([]CallResult, 0, len(calls))
	return r
}

// exec runs every group, then settles the step: drain, synthetic pairs on abort, final flush.
func (r *run) exec() {
	defer r.recoverInternal()
	if r.ctx.Err() != nil {
		r.resolveStarted()
	}
	for r.next < len(r.calls) && r.mayStart() {
		r.runGroup()
	}
	r.drain()
	if r.ctx.Err() != nil {
		r.out.Aborted = true
	}
	r.park()
	if r.out.Aborted && r.err == nil && len(r.out.Parked) == 0 {
		r.synthesize()
	}
	if !r.emDead {
		if se, ok := r.em.(StepEnder); ok {
			r.emit(se.StepEnd(r.emCtx, r.out))
		} else {
			r.emit(r.em.Flush(r.emCtx))
		}
	}
}

// mayStart reports whether a new call may start: no internal failure and the step signal not
// aborted. It is the SCHED-6 check, made before every start.
func (r *run) mayStart() bool {
	if r.err != nil || r.parking {
		return false
	}
	if r.ctx.Err() != nil {
		r.out.Aborted = true
		return false
	}
	return true
}

// runGroup runs the group that begins at r.next (SCHED-2) and drains it.
func (r *run) runGroup() {
	parallel := r.mode(r.next) == registry.Parallel
	client := r.isClient(r.next)
	r.beginGroup(parallel, client)
	defer func() {
		r.groupCtx = nil
		if r.waiting > 0 {
			r.parking = true // the step parks at the end of this group
		}
	}()
	if !parallel {
		r.start(r.next)
		r.drain()
		return
	}
	limit, err := r.s.cfg.maxParallel()
	if err != nil {
		r.fail(err)
		return
	}
	// The pool's calls are started (tool/call, prepare) one after the other, in model order, but
	// launched together: one flush makes all their tool/call events durable before their bodies
	// run, instead of one flush per call.
	r.startGrouped(r.next)
	for {
		r.commitReady()
		if r.next >= len(r.calls) || !r.mayStart() {
			break
		}
		if r.inflight+len(r.pending) >= limit {
			r.launch()
			r.waitOne()
			r.collectSettled() // every slot freed by now, so that the next launch fills them all
			continue
		}
		if r.mode(r.next) != registry.Parallel || r.isClient(r.next) != client {
			break // a run of client-executed calls is a group of its own
		}
		r.startGrouped(r.next)
	}
	r.launch()
	r.drain()
}

// mode classifies call i just before it would start and records it on the call. A panicking
// classifier means exclusive.
func (r *run) mode(i int) (m registry.Mode) {
	in := r.input(i)
	defer func() {
		if v := recover(); v != nil {
			r.logPanic("executionMode", r.calls[i], v, debug.Stack())
			m = registry.Exclusive
		}
		r.calls[i].Mode = m
	}()
	return r.s.pipe.ExecutionMode(in)
}

// beginGroup calls Config.GroupFunc, if set, with the calls of the group that begins at r.next:
// that call alone when it is exclusive, else it and the following calls that classify parallel
// now (peekMode; each is classified again when it would start).
func (r *run) beginGroup(parallel, client bool) {
	r.groupCtx = nil
	if r.s.cfg.GroupFunc == nil {
		return
	}
	ins := []registry.Input{r.input(r.next)}
	for i := r.next + 1; parallel && i < len(r.calls) && r.peekMode(i) == registry.Parallel && r.isClient(i) == client; i++ {
		ins = append(ins, r.input(i))
	}
	r.groupCtx = r.s.cfg.GroupFunc(r.ctx, ins)
}

// peekMode classifies call i ahead of its start, without recording the mode or logging a panic
// (the classification at its start does both). A panicking classifier means exclusive.
func (r *run) peekMode(i int) (m registry.Mode) {
	in := r.input(i)
	defer func() {
		if recover() != nil {
			m = registry.Exclusive
		}
	}()
	return r.s.pipe.ExecutionMode(in)
}

// isClient reports whether call i is of a client-executed tool (ClientClassifier; false when
// the pipeline cannot tell).
func (r *run) isClient(i int) bool {
	cc, ok := r.s.pipe.(ClientClassifier)
	return ok && cc.IsClient(r.input(i))
}

// input returns the pipeline input of call i, parsing its arguments once (SCHED-1).
func (r *run) input(i int) registry.Input {
	if r.inputs[i].Args == nil { // ParseArguments never returns nil
		r.inputs[i] = r.step.input(r.calls[i])
	}
	return r.inputs[i]
}

// waitOne blocks until one dispatched body settles and marks its slot done.
func (r *run) waitOne() {
	if r.s.onWait != nil {
		r.s.onWait()
	}
	sl := <-r.settledCh
	sl.done = true
	r.inflight--
}

// collectSettled takes every dispatch that has settled by now, without waiting.
func (r *run) collectSettled() {
	for {
		select {
		case sl := <-r.settledCh:
			sl.done = true
			r.inflight--
		default:
			return
		}
	}
}

// drain waits for every dispatched body and commits the started calls in order, up to the first
// that waits outside the server (a parked ask or a client call: commitReady stops there).
func (r *run) drain() {
	for {
		r.commitReady()
		if r.head >= r.next || r.inflight == 0 {
			return
		}
		r.waitOne()
	}
}

// resolveStarted runs, one at a time, the calls of a resumed step that had started when the turn
// parked, before anything else of a step whose signal is already aborted (the turn was cancelled
// while parked): each gets its own result (its ask decided cancelled, a client call ABORTED)
// instead of the synthetic ABORTED_BEFORE_DISPATCH of calls that never started.
func (r *run) resolveStarted() {
	for r.next < len(r.calls) && r.err == nil && (r.calls[r.next].Started() || r.committed(r.next)) {
		r.start(r.next)
		r.drain()
	}
}

// committed reports whether call i's result is in the log already (a resumed step skips it).
func (r *run) committed(i int) bool {
	c := r.calls[i]
	return c.Resume != nil && c.Resume.Committed
}

// park records the calls the step waits for (Outcome.Parked): the uncommitted started calls from
// the commit cursor on that wait outside the server. The spans of every uncommitted call end here;
// the loop instance that resumes the turn gives them spans of their own.
func (r *run) park() {
	for i := r.head; i < r.next; i++ {
		sl := r.slots[i]
		if sl == nil {
			continue
		}
		if sl.wait != "" {
			pc := ParkedCall{Call: r.calls[i], CallSeq: sl.callSeq, Kind: sl.wait}
			if sl.prep != nil {
				pc.TimeoutMs = sl.prep.TimeoutMs()
			}
			r.out.Parked = append(r.out.Parked, pc)
		}
		if sl.span != nil {
			telemetry.EndTool(sl.span, sl.call.Name, false, "")
			sl.span = nil
		}
	}
}

// commitReady commits every settled call at the head of the queue, in model order (SCHED-4).
func (r *run) commitReady() {
	for r.head < r.next && r.slots[r.head].done {
		r.commit(r.slots[r.head])
		r.head++
	}
}

// synthesize gives every call that never started its synthetic ABORTED_BEFORE_DISPATCH pair
// (SCHED-6).
func (r *run) synthesize() {
	for ; r.next < len(r.calls) && !r.emDead; r.next++ {
		c := r.calls[r.next]
		if r.committed(r.next) {
			continue
		}
		seq, err := r.em.ToolCall(r.emCtx, c)
		if !r.emit(err) {
			return
		}
		res := registry.AbortedBeforeDispatchResult()
		if !r.emit(r.em.ToolResult(r.emCtx, c, seq, res)) {
			return
		}
		r.out.Results = append(r.out.Results, CallResult{Call: c, CallSeq: seq, Result: res, Synthetic: true})
	}
}

// emit records an emitter error as the internal failure and reports whether err was nil.
func (r *run) emit(err error) bool {
	if err == nil {
		return true
	}
	r.emDead = true
	r.fail(fmt.Errorf("scheduler: emitter: %w", err))
	return false
}

// fail records the first internal failure; later ones are dropped.
func (r *run) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// recoverInternal turns a panic of the scheduler itself into an internal failure, after waiting
// for every dispatched body so that no goroutine outlives RunStep.
func (r *run) recoverInternal() {
	v := recover()
	if v == nil {
		return
	}
	r.s.cfg.Logger.ErrorContext(r.ctx, "scheduler: internal panic", "panic", v, "stack", string(debug.Stack()))
	r.fail(fmt.Errorf("scheduler: internal panic: %v", v))
	for r.inflight > 0 {
		<-r.settledCh
		r.inflight--
	}
}
