package agentloop

import (
	"context"
	"sync"

	"github.com/dshd/dshd/pkg/eventlog"
)

// CancelEvents returns the events of a cancel request (LOOP-7) for head h: unless keepInbox, one
// deletion splice with outcome "canceled" per non-empty inbox list, then the durable
// `agent/cancel` marker that the runner of the turn reacts to. Use it as (part of) a BuildFunc.
func CancelEvents(h eventlog.Head, cause Cause, keepInbox bool) []eventlog.NewEvent {
	var evs []eventlog.NewEvent
	if !keepInbox {
		if h.Inbox.NextTurn > 0 {
			evs = append(evs, eventlog.NewEvent{Type: eventlog.TypeInboxSpliced,
				Data: eventlog.Deletion(eventlog.InboxNextTurn, h.Inbox.NextTurn, eventlog.OutcomeCanceled)})
		}
		if h.Inbox.NextStep > 0 {
			evs = append(evs, eventlog.NewEvent{Type: eventlog.TypeInboxSpliced,
				Data: eventlog.Deletion(eventlog.InboxNextStep, h.Inbox.NextStep, eventlog.OutcomeCanceled)})
		}
	}
	return append(evs, eventlog.NewEvent{Type: eventlog.TypeAgentCancel, Ignorable: true,
		Data: eventlog.AgentCancel{Reason: cause, KeepInbox: keepInbox}})
}

// interrupter holds the cancel function of the running turn. It is safe for concurrent use: a
// watcher goroutine calls Interrupt while the runner's goroutine runs the turn.
type interrupter struct {
	mu     sync.Mutex
	cancel context.CancelCauseFunc
}

func (in *interrupter) set(c context.CancelCauseFunc) {
	in.mu.Lock()
	in.cancel = c
	in.mu.Unlock()
}

func (in *interrupter) interrupt(cause Cause) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cancel == nil {
		return false
	}
	in.cancel(&CancelError{Cause: cause})
	return true
}

// Interrupt aborts the running turn with cause and reports whether a turn was running. It is
// safe to call from any goroutine.
func (r *Runner) Interrupt(cause Cause) bool { return r.intr.interrupt(cause) }
