package codemode

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/registry"
)

// maxLogBatch bounds the events one Commit of the dispatch log writes.
const maxLogBatch = 64

// dispatchLog writes a run's `tool/code-dispatch-start` and `tool/code-dispatch` events through
// the outer execution's recorder (CODE-7), in the order they are added, as tracked background
// work: add blocks while pending events fill the queue (back-pressure, maxParallelSubCalls
// events), and close waits for every append. Events queued together are committed in one batch.
// After a failed append the rest are dropped; close reports the first failure.
type dispatchLog struct {
	rec    registry.Recorder
	ctx    context.Context
	ch     chan eventlog.NewEvent
	done   chan struct{}
	err    error // owned by the writer goroutine until done is closed
	logger *slog.Logger
}

// newDispatchLog starts the writer. ctx carries the call's values; its cancellation is ignored,
// so that the events of an aborted run are still written.
func newDispatchLog(ctx context.Context, rec registry.Recorder, pending int, logger *slog.Logger) *dispatchLog {
	d := &dispatchLog{rec: rec, ctx: context.WithoutCancel(ctx), ch: make(chan eventlog.NewEvent, pending),
		done: make(chan struct{}), logger: logger}
	go d.write()
	return d
}

func (d *dispatchLog) add(p eventlog.Payload) { d.ch <- eventlog.Of(p) }

func (d *dispatchLog) write() {
	defer close(d.done)
	for ev := range d.ch {
		batch := []eventlog.NewEvent{ev}
	more:
		for len(batch) < maxLogBatch {
			select {
			case e, ok := <-d.ch:
				if !ok {
					break more
				}
				batch = append(batch, e)
			default:
				break more
			}
		}
		if d.err != nil {
			continue
		}
		if _, err := d.rec.Commit(d.ctx, batch...); err != nil {
			d.err = err
			d.logger.ErrorContext(d.ctx, "codemode: the sub-call log append failed", "err", err) // in the call's trace
		}
	}
}

// close waits for every queued append and returns the first failure.
func (d *dispatchLog) close() error {
	close(d.ch)
	<-d.done
	return d.err
}

// location is the JSON of a call's location, omitted when it has none.
func location(l registry.Location) json.RawMessage {
	if l == (registry.Location{}) {
		return nil
	}
	b, _ := json.Marshal(l)
	return b
}
