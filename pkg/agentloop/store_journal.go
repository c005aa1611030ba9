package agentloop

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
)

// StoreJournal is the Journal of one session over the PostgreSQL store, for the worker holding the
// session's run lease: every append is fenced by Owner.
//
// Appends are optimistic: the journal tracks the head of the log (next seq, inbox lengths) from
// everything it appended and read, builds the batch for that head and appends it in one statement
// conditioned on the log still ending there. When another writer got in first (an HTTP handler
// inserted a message, a cancel arrived) the append fails with ErrStale; the runner reads what it
// missed and builds again. Before the head is known (nothing read yet) appends take the locked
// path.
type StoreJournal struct {
	Store   *eventlog.Store
	Hub     *eventlog.Hub // optional: Latest uses its notifications
	Tenant  uuid.UUID
	Session uuid.UUID
	Owner   uuid.UUID

	known bool
	head  Head // valid when known
	unsub func()
	next  atomic.Int64 // head.NextSeq, readable from other goroutines
}

// Seen returns the highest seq the journal has appended, is appending or has read (-1 before
// any). It is safe for concurrent use: a replica's cancel watcher uses it to tell foreign events
// from the runner's own.
func (j *StoreJournal) Seen() int64 { return j.next.Load() - 1 }

// Open subscribes to the session's notifications (when a Hub is set). Close undoes it.
func (j *StoreJournal) Open() {
	if j.Hub != nil && j.unsub == nil {
		_, j.unsub = j.Hub.Subscribe(j.Session)
	}
}

// Close releases the notification subscription.
func (j *StoreJournal) Close() {
	if j.unsub != nil {
		j.unsub()
		j.unsub = nil
	}
}

// Append implements Journal.
func (j *StoreJournal) Append(ctx context.Context, build BuildFunc) ([]eventlog.Event, error) {
	if !j.known {
		return j.appendLocked(ctx, build)
	}
	evs, err := build(j.head)
	if err != nil || len(evs) == 0 {
		return nil, err
	}
	owner := j.Owner
	// The seqs this append will take are known before it runs: publish them first, so that the
	// notification of the commit, which may arrive before the append returns, reads as the
	// runner's own and not as news (Seen).
	j.next.Store(j.head.NextSeq + int64(len(evs)))
	out, err := j.Store.EventAppendAt(ctx, j.Tenant, j.Session, j.head.NextSeq-1, &owner, evs...)
	if err != nil {
		j.next.Store(j.head.NextSeq)
	}
	if errors.Is(err, eventlog.ErrMoved) {
		return nil, fmt.Errorf("%w: %w", ErrStale, err)
	}
	if err != nil {
		return nil, err
	}
	j.track(out)
	return out, nil
}

func (j *StoreJournal) appendLocked(ctx context.Context, build BuildFunc) ([]eventlog.Event, error) {
	var before eventlog.Head
	out, err := j.Store.EventAppendFunc(ctx, j.Tenant, j.Session, func(h eventlog.Head) ([]eventlog.NewEvent, error) {
		if h.Owner == nil || *h.Owner != j.Owner {
			return nil, eventlog.ErrLeaseLost
		}
		before = h
		return build(Head{NextSeq: h.LastSeq + 1, NextTurnLen: h.Inbox.NextTurn, NextStepLen: h.Inbox.NextStep})
	})
	if err != nil || len(out) == 0 {
		return out, err
	}
	// The locked head and this batch make the journal's head known.
	j.head = Head{NextSeq: before.LastSeq + 1, NextTurnLen: before.Inbox.NextTurn, NextStepLen: before.Inbox.NextStep}
	j.known = true
	j.track(out)
	return out, nil
}

// track advances the head over committed events that follow it.
func (j *StoreJournal) track(evs []eventlog.Event) {
	for _, ev := range evs {
		if ev.Seq != j.head.NextSeq {
			continue
		}
		j.head.NextSeq++
		j.next.Store(j.head.NextSeq)
		if ev.Type == eventlog.TypeInboxSpliced {
			if s, err := spliceOf(ev.Data); err == nil {
				n := lenOf(&j.head, s.Target)
				*n += len(s.Inserted) - s.Removed()
			}
		}
	}
}

// Since implements Journal. Reading from the start makes the head known.
func (j *StoreJournal) Since(ctx context.Context, after int64) ([]eventlog.Event, error) {
	if after < 0 && !j.known {
		j.head, j.known = Head{}, true
	}
	var out []eventlog.Event
	for {
		page, err := j.Store.EventList(ctx, j.Tenant, j.Session, eventlog.ListQuery{After: after, Limit: 1000})
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].Seq
	}
	if j.known {
		j.track(out)
	}
	return out, nil
}

// Latest implements Journal: the highest seq notified, or the journal's own head.
func (j *StoreJournal) Latest() int64 {
	own := j.head.NextSeq - 1
	if j.Hub != nil {
		if seq, ok := j.Hub.Latest(j.Session); ok && seq > own {
			return seq
		}
	}
	return own
}
