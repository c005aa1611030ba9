package codemode

import (
	"runtime"
	"sync"
	"time"
)

// The CPU budget of a run is the CPU time of the engine's thread while it evaluates JavaScript.
// The engine (modernc.org/quickjs, C translated to Go) runs on the run's goroutine, which each
// call into JavaScript locks to its OS thread (the host functions JavaScript calls and the jobs
// it queues run within the call, on the same goroutine): the thread's CPU clock then counts that
// goroutine only, and time the thread spends descheduled (other goroutines, other processes, a host call
// that blocks) is not charged. The engine's own interrupt check cannot be given a clock, so a
// watcher reads the thread's clock instead: it runs first when the budget could be spent at the
// earliest (CPU time never runs faster than the wall clock), and again when what is left could be
// spent, so the hot path of the engine pays nothing and a program overruns its budget by at most
// about minCheck. The goroutine is locked only within a call into JavaScript, not for the whole
// run: a locked goroutine costs a thread handoff each time it blocks or is preempted (for a
// collection), which made a run that only returns 1 three times slower when the whole run was
// locked, engine start and close included.
//
// The budget fails closed: New probes the thread clock once (threadClockWorks) and, where it
// cannot be read, every call is charged its wall time; a reading that fails later, or that would
// go backwards, charges the call its wall time too (never less than its CPU time), so a clock
// that stops working cannot make a call free.

const (
	// minCheck is the shortest interval between two readings of the watcher.
	minCheck = time.Millisecond
	// reinterrupt is how often the watcher repeats the interrupt of a run whose budget is spent
	// while the run is still in the engine: an engine call that began after the first interrupt
	// cleared it (each call from Go into JavaScript starts with no interrupt pending).
	reinterrupt = 10 * time.Millisecond
)

// cpuWatch measures one call into JavaScript against what is left of the budget and stops the
// run when the call spends it. Its methods are safe for concurrent use.
type cpuWatch struct {
	s     *session
	clock threadClock   // the CPU clock of the call's thread
	start time.Duration // the thread's CPU time when the call began
	cpu   bool          // whether start was read: otherwise the call is charged wall time
	wall  time.Time     // when the call began (monotonic), for the wall-time charge
	left  time.Duration // the budget left when the call began

	mu     sync.Mutex
	active bool
	timer  *time.Timer
}

// watch starts measuring a call into JavaScript on the thread of clock, to which the caller is
// locked; stop ends it. A run has one watch, which each call into JavaScript starts again, with
// its timer: a reading the timer started for an earlier call and that runs late reads this call.
func (s *session) watch(clock threadClock) *cpuWatch {
	w := s.meter
	if w == nil {
		w = &cpuWatch{s: s}
		s.meter = w
	}
	wall := time.Now()
	start, cpu := clock.read()
	w.mu.Lock()
	w.clock, w.wall, w.left, w.active = clock, wall, s.cpuLeft, true
	w.start, w.cpu = start, cpu
	if w.timer == nil {
		w.timer = time.AfterFunc(w.left, w.check)
	} else {
		w.timer.Reset(w.left)
	}
	w.mu.Unlock()
	return w
}

// used is the CPU time the call has used so far: the thread clock's advance, or the wall time
// since the call began when the clock cannot be read (or reads less than at the start).
func (w *cpuWatch) used() time.Duration {
	if w.cpu {
		if now, ok := w.clock.read(); ok && now >= w.start {
			return now - w.start
		}
	}
	return time.Since(w.wall)
}

// check is the watcher's reading: it fails the run when the call has spent what was left, and
// otherwise runs again when what is still left could be spent.
func (w *cpuWatch) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.active {
		return
	}
	next := w.left - w.used()
	switch {
	case next <= 0:
		w.s.cpuExhausted()
		w.s.vm.Interrupt()
		next = reinterrupt
	case w.s.reason.Load() != nil:
		w.s.vm.Interrupt() // a failure recorded meanwhile whose interrupt an engine call cleared
	}
	w.timer.Reset(max(next, minCheck))
}

// stop ends the measurement and returns the CPU time the call used.
func (w *cpuWatch) stop() time.Duration {
	w.mu.Lock()
	w.active = false
	w.timer.Stop()
	w.mu.Unlock()
	return w.used() // the fields watch set: stop runs on the goroutine that called it
}

// threadClockWorks reports whether the calling goroutine's thread clock can be read: New's probe.
// Where it cannot, runs use threadClock{} (wall time) rather than a clock that reads nothing.
func threadClockWorks() bool {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_, ok := currentThreadClock().read()
	return ok
}
