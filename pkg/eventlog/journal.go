package eventlog

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dshd/dshd/pkg/fault"
)

// Errors of the Journal seam. Callers branch on them with errors.Is.
var (
	// ErrStale: the batch was built for a head the log has moved past (another writer appended
	// meanwhile). A BuildFunc returns it, or the journal does; the caller reads what it missed
	// and builds again.
	ErrStale = &fault.Error{Code: fault.Stale, Message: "eventlog: the session log moved on; refresh and retry"}
	// ErrLeaseLost: the journal's writer no longer holds the session's run lease.
	ErrLeaseLost = &fault.Error{Code: fault.LeaseLost, Message: "eventlog: the session's run lease is held by another writer"}
	// ErrNotFound: the session does not exist, belongs to another tenant, or was deleted.
	ErrNotFound = &fault.Error{Code: fault.NotFound, Message: "session not found"}
	// ErrConflict: a session with the requested id already exists.
	ErrConflict = &fault.Error{Code: fault.Conflict, Message: "a session with this id already exists"}
)

// Lease is a session's run lease: who may run its turns, and until when. Owner is "" when the
// lease is free.
type Lease struct {
	Owner string
	Until time.Time
}

// HeldAt reports whether the lease is held and not expired at t.
func (l Lease) HeldAt(t time.Time) bool { return l.Owner != "" && l.Until.After(t) }

// Head is the state of a session's log as an append sees it, under the session's append lock:
// the seq the batch's first event gets, the inbox lengths, and the run lease.
type Head struct {
	Next  int64
	Inbox InboxLens
	Lease Lease
}

// Last returns the seq of the last event, -1 for an empty log.
func (h Head) Last() int64 { return h.Next - 1 }

// BuildFunc builds a batch for the head it is given. It may be called more than once (a store
// may retry) and must have no side effects beyond its return value. Returning no events appends
// nothing; returning an error appends nothing and Append returns the error as is.
type BuildFunc func(h Head) ([]NewEvent, error)

// Journal is one session's log as a writer sees it: the one seam every writer and reader of a
// session's events goes through, implemented in memory (MemJournal) and over PostgreSQL (the
// pgstore adapter). eventlogtest is the conformance suite both pass.
//
// Append calls build with the head and appends what it returns in one atomic step, with
// contiguous seqs from h.Next, and returns the committed events: nothing is visible to readers,
// and no follower is woken, before the commit. Every event is validated (SES rules); a splice
// that does not fit the inbox is refused (LOOP-1); a failing append leaves the log unchanged. A
// journal opened for a lease owner fences every append with the lease (ErrLeaseLost).
//
// Since returns the committed events with seq > after, in order.
//
// Wait blocks until an event with seq > after is committed, or ctx is done (its error is then
// returned). Together with Since it is the follow primitive.
//
// Latest returns the highest seq known to be committed, cheaply and possibly a little behind.
//
// A Journal is safe for concurrent use unless an implementation says otherwise.
type Journal interface {
	Append(ctx context.Context, build BuildFunc) ([]Event, error)
	Since(ctx context.Context, after int64) ([]Event, error)
	Wait(ctx context.Context, after int64) error
	Latest() int64
}

// MemJournal is the in-memory Journal of one session over a Log, for tests, benchmarks and
// embedding without PostgreSQL. Views (Writer) share one log, one inbox and one lease, and may
// append concurrently: an HTTP handler inserting into the inbox while a runner appends.
type MemJournal struct {
	mu    sync.Mutex
	log   *Log
	inbox InboxLens
	lease Lease
	now   func() time.Time
	wake  chan struct{} // closed and replaced on every commit
	// OnAppend, when set, is called with every committed batch, under the journal's lock.
	OnAppend func([]Event)
}

// NewMemJournal returns an empty in-memory journal whose events and leases use the clock now
// (time.Now when nil). The journal itself writes without a lease; Writer returns a fenced view.
func NewMemJournal(now func() time.Time) *MemJournal {
	if now == nil {
		now = time.Now
	}
	return &MemJournal{log: NewLog(now), now: now, wake: make(chan struct{})}
}

// Append implements Journal, unfenced.
func (j *MemJournal) Append(ctx context.Context, build BuildFunc) ([]Event, error) {
	return j.append(ctx, "", build)
}

func (j *MemJournal) append(ctx context.Context, owner string, build BuildFunc) ([]Event, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	// As a store's append, one whose context is done (also while it waited for the lock)
	// commits nothing.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h := Head{Next: int64(j.log.Len()), Inbox: j.inbox, Lease: j.lease}
	if owner != "" && (j.lease.Owner != owner || !j.lease.HeldAt(j.now())) {
		return nil, ErrLeaseLost
	}
	evs, err := build(h)
	if err != nil || len(evs) == 0 {
		return nil, err
	}
	batch, err := Prepare(evs)
	if err != nil {
		return nil, err
	}
	Stamp(batch, h.Next, j.now().UnixMilli())
	lens, err := j.inbox.After(batch)
	if err != nil {
		return nil, err
	}
	if err := j.log.commit(batch); err != nil {
		return nil, err
	}
	j.inbox = lens
	if j.OnAppend != nil {
		j.OnAppend(batch)
	}
	close(j.wake)
	j.wake = make(chan struct{})
	return batch, nil
}

// Since implements Journal.
func (j *MemJournal) Since(_ context.Context, after int64) ([]Event, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if after+1 >= int64(j.log.Len()) {
		return nil, nil
	}
	return append([]Event(nil), j.log.events[max(after+1, 0):]...), nil
}

// Wait implements Journal.
func (j *MemJournal) Wait(ctx context.Context, after int64) error {
	for {
		j.mu.Lock()
		last, wake := int64(j.log.Len())-1, j.wake
		j.mu.Unlock()
		if last > after {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		}
	}
}

// Latest implements Journal.
func (j *MemJournal) Latest() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return int64(j.log.Len()) - 1
}

// Events returns a copy of the whole log.
func (j *MemJournal) Events() []Event {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.log.Events()
}

// Head returns the journal's head.
func (j *MemJournal) Head() Head {
	j.mu.Lock()
	defer j.mu.Unlock()
	return Head{Next: int64(j.log.Len()), Inbox: j.inbox, Lease: j.lease}
}

// LeaseAcquire gives owner the lease for ttl if it is free, expired or already owner's, and
// reports whether owner holds it.
func (j *MemJournal) LeaseAcquire(owner string, ttl time.Duration) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	now := j.now()
	if j.lease.HeldAt(now) && j.lease.Owner != owner {
		return false
	}
	j.lease = Lease{Owner: owner, Until: now.Add(ttl)}
	return true
}

// LeaseRelease frees owner's lease; releasing a lease one does not hold does nothing.
func (j *MemJournal) LeaseRelease(owner string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.lease.Owner == owner {
		j.lease = Lease{}
	}
}

// Writer returns a view of the journal whose appends are fenced by owner's lease.
func (j *MemJournal) Writer(owner string) Journal { return memWriter{j, owner} }

type memWriter struct {
	*MemJournal
	owner string
}

func (w memWriter) Append(ctx context.Context, build BuildFunc) ([]Event, error) {
	return w.append(ctx, w.owner, build)
}

// Batch returns a BuildFunc that appends evs whatever the head.
func Batch(evs ...NewEvent) BuildFunc {
	return func(Head) ([]NewEvent, error) { return evs, nil }
}

// Follow is the one way a client of the log follows it: it calls fn with every batch of events
// committed after the cursor, in seq order, until ctx is done (its error is returned) or fn or a
// read fails. cursor returns the seq the caller has seen; the caller may advance it by other
// means (a batch it was handed in process), and Follow then neither waits for nor reads what it
// covers. Events fn is given may include some at or below a cursor that moved meanwhile: fn must
// drop them. A failed read is retried after the next wake-up unless it is eventlog.ErrNotFound
// (the session is gone), which is returned.
func Follow(ctx context.Context, j Journal, cursor func() int64, fn func([]Event) error) error {
	for {
		after := cursor()
		if err := j.Wait(ctx, after); err != nil {
			return err
		}
		if cursor() > after {
			// The cursor moved while Wait waited (a batch handed over in process, the caller's
			// own append): the wake-up may be for what it covers. Wait again from the new
			// cursor, which returns at once when there is more after it, rather than read a
			// page that may well be empty.
			continue
		}
		// The read is not cut by ctx but bounded: a store may lose a connection to a cancelled
		// query (pgx closes it), and a follower that stops as it reads is common.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), followReadTimeout)
		evs, err := j.Since(rctx, cursor())
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch {
		case errors.Is(err, ErrNotFound):
			return err
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			select { // a passing failure: try again a little later
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(followRetry):
			}
			continue
		}
		if len(evs) > 0 {
			if err := fn(evs); err != nil {
				return err
			}
		}
	}
}

// followReadTimeout bounds one read of Follow.
const followReadTimeout = 30 * time.Second

// followRetry is how long Follow waits after a failed read.
const followRetry = 100 * time.Millisecond
