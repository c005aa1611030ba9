package agentloop

import (
	"context"
	"sync"
	"time"
)

// startFlusher commits the writer's pending events once the oldest of them has waited the chunk
// window (or they passed the size bound) while the step's tool calls run (docs/rules.md,
// log-window: no event waits on work). Without it a step of concurrency-safe calls would hold its `assistant/message`
// and `tool/call`s, and with a fast model even `turn/start`, until the calls returned: nothing
// else flushes while the scheduler waits on their bodies. A result that settles inside the
// window still shares its call's commit.
//
// The flusher takes e.mu for every look at the writer, as every other user of the writer does
// during RunStep. A write that fails is kept in e.logErr and cancels the step through
// cancelStep; the flusher then stops, and every later flush of the step returns that error. The
// returned stop function ends the flusher and waits for it; call it after RunStep returned,
// without holding e.mu (a second call does nothing, so that it may also be deferred).
func (e *stepEmitter) startFlusher(ctx context.Context, cancelStep context.CancelCauseFunc) (stop func()) {
	w := e.r.w
	window, maxBytes := e.r.cfg.ChunkWindow, e.r.cfg.ChunkBytes
	kick := make(chan struct{}, 1)
	kick <- struct{}{} // look at what is pending already (the model's message, turn/start)
	done := make(chan struct{})
	e.mu.Lock()
	w.staged = kick
	e.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		timer := time.NewTimer(window)
		defer timer.Stop()
		for {
			select {
			case <-done:
				return
			case <-kick:
			case <-timer.C:
			}
			e.mu.Lock()
			err := e.logErr // a Commit of a body failed: the step stops, nothing more is flushed
			if err == nil && w.due(window, maxBytes) {
				err = e.flushLocked(ctx)
			}
			wait, pending := w.untilDue(window)
			e.mu.Unlock()
			if err != nil {
				cancelStep(err)
				return
			}
			if pending {
				resetTimer(timer, max(wait, time.Millisecond))
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
			e.mu.Lock()
			w.staged = nil
			e.mu.Unlock()
		})
	}
}

// resetTimer stops t, drains a fire it may hold, and arms it for d.
func resetTimer(t *time.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	t.Reset(d)
}
