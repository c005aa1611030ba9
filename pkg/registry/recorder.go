package registry

import (
	"context"
	"errors"

	"github.com/dshd/dshd/pkg/eventlog"
)

// Recorder is the session log as a running call sees it. Commit appends evs at once, after every
// event of the session staged before it (the call's own `tool/call` among them), in one batch
// fenced by the turn runner's lease, and returns them committed: followers of the log (SSE
// clients) can see them while the call still runs. Surface events are refused (the loop writes
// those); unknown types need Ignorable. Implementations are safe for concurrent use by the bodies
// of parallel calls.
//
// CommitFunc is Commit of what build returns, called under the session's append lock with the
// committed events of the running turn (from its turn/start): a writer that must not write twice
// what another may have written meanwhile (an approval's decision) looks there first. build may
// be called more than once and returns no events to write nothing.
type Recorder interface {
	Commit(ctx context.Context, evs ...eventlog.NewEvent) ([]eventlog.Event, error)
	CommitFunc(ctx context.Context, build func(turn []eventlog.Event) ([]eventlog.NewEvent, error)) error
}

// ErrNoSession is returned by Execution.Commit for a call that runs outside a session (its input
// had no Recorder).
var ErrNoSession = errors.New("registry: the call has no session log to write to")

// Commit writes evs to the session log now, through the Recorder of the call's input (see
// Recorder), and returns them committed. Nested calls write through their parent's recorder.
func (e *Execution) Commit(ctx context.Context, evs ...eventlog.NewEvent) ([]eventlog.Event, error) {
	if e.log == nil {
		return nil, ErrNoSession
	}
	return e.log.Commit(ctx, evs...)
}

// Recorder returns the recorder the call writes through (nil outside a session), for nested
// calls' inputs.
func (e *Execution) Recorder() Recorder { return e.log }
