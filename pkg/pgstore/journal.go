package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
)

// Journal is one session's eventlog.Journal over the store. A journal opened with an owner is a
// turn runner's: every append is fenced by that owner's run lease (eventlog.ErrLeaseLost once it
// is lost). One opened without (uuid.Nil) is an unfenced writer, as an HTTP handler.
//
// Appends are optimistic once the journal knows the head of the log (from everything it appended
// and read): it builds the batch for that head and appends it in one statement conditioned on the
// log still ending there (and on the lease). When another writer got in first the append fails
// with eventlog.ErrStale and appends nothing; the caller reads what it missed (Since) and builds
// again. Before the head is known, an append locks the session's counter row, reads the head,
// builds and appends in one transaction.
//
// Append and Since are used by one goroutine at a time; Latest, Wait and Seen are safe for
// concurrent use.
type Journal struct {
	store           *Store
	hub             Notifier
	tenant, session uuid.UUID
	owner           *uuid.UUID

	known bool
	head  eventlog.Head // valid when known
	next  atomic.Int64  // head.Next, readable from other goroutines (ahead while an append runs)
	done  atomic.Int64  // 1 + the highest seq this journal committed or read
	unsub func()

	// releaseAtTurnEnd makes an append that ends a turn also release the lease when no followup
	// waits (released then records that it did).
	releaseAtTurnEnd bool
	released         atomic.Bool

	// seed, when set, answers the next Since (Seed).
	seed []eventlog.Event
}

// Seed hands the journal the events of a commit its caller just made, a post's splice: the next
// Since from just before them returns them without reading the log, as a read at that commit
// would have. A post that takes the session's lease so gives its runner what it appended: the
// whole log of a new session, or what a cached runner has not seen. The seed is used only when
// it begins right after the cursor Since is given (otherwise it reads as usual), and only once.
// What others commit after it is folded as after any read (Latest, or a stale append's re-read).
// Not safe for concurrent use with Since.
func (j *Journal) Seed(evs []eventlog.Event) { j.seed = evs }

// ReleaseAtTurnEnd makes every append of a batch that ends a turn (turn/end) also give up the
// journal owner's lease, in the same statement, when no followup waits in the inbox after it: a
// turn runner's last write of a serve needs no statement of its own. Released reports it.
func (j *Journal) ReleaseAtTurnEnd(on bool) { j.releaseAtTurnEnd = on }

// Released reports whether an append released the lease (ReleaseAtTurnEnd): the journal's owner
// no longer holds it, and further appends fail with eventlog.ErrLeaseLost.
func (j *Journal) Released() bool { return j.released.Load() }

// Notifier is what a journal needs of a Hub: wake-ups of a session's commits, and the highest seq
// they vouch for. *Hub implements it.
type Notifier interface {
	Subscribe(sessionID uuid.UUID) (wake <-chan struct{}, cancel func())
	Latest(sessionID uuid.UUID) (int64, bool)
}

// Journal returns the journal of the session for owner (uuid.Nil: unfenced). hub, when not nil,
// serves Wait and Latest from its notifications; without one they read the database.
func (s *Store) Journal(hub Notifier, tenantID, sessionID, owner uuid.UUID) *Journal {
	j := &Journal{store: s, tenant: tenantID, session: sessionID}
	if h, ok := hub.(*Hub); !ok || h != nil {
		j.hub = hub
	}
	j.SetOwner(owner)
	return j
}

// SetOwner changes the lease owner that fences the journal's appends (a kept runner serves each
// job under a fresh lease identity). Not safe to call while an append runs.
func (j *Journal) SetOwner(owner uuid.UUID) {
	j.released.Store(false)
	j.owner = nil
	if owner != uuid.Nil {
		j.owner = &owner
	}
}

// Open subscribes the journal to its session's notifications, so that Latest follows other
// writers' commits (when it has a hub). Close undoes it.
func (j *Journal) Open() {
	if j.hub != nil && j.unsub == nil {
		_, j.unsub = j.hub.Subscribe(j.session)
	}
}

// Close releases the subscription of Open.
func (j *Journal) Close() {
	if j.unsub != nil {
		j.unsub()
		j.unsub = nil
	}
}

// Seen returns the highest seq the journal has appended, is appending or has read (-1 before
// any). A replica's cancel watcher uses it to tell foreign events from the runner's own.
func (j *Journal) Seen() int64 { return j.next.Load() - 1 }

// Append implements eventlog.Journal.
//
// A fenced journal (a turn runner's) retries an append that failed because the database was
// unavailable, with backoff, for up to the store's StoreConfig.RetryUnavailable: an outage
// shorter than that only pauses the turn. When the failed statement may have committed (the
// connection was lost before its reply), the batch is read back before anything else is sent:
// when the log holds it, it committed; otherwise the same batch is sent again, for the same
// head (the statement's conditions refuse it if the log moved meanwhile, and a late commit of
// the lost statement is recognized by a second read-back). A batch is never written twice.
func (j *Journal) Append(ctx context.Context, build eventlog.BuildFunc) ([]eventlog.Event, error) {
	var (
		out  []eventlog.Event
		sent *appendParams // a batch whose statement failed with its outcome unknown
		err  error
	)
	j.store.flying.begin(j.session)
	defer j.store.flying.end(j.session)
	r := j.retrier()
	locked := !j.known
	gen, observe := j.observer()
	for {
		switch {
		case sent != nil:
			out, sent, err = j.resend(ctx, *sent)
		case !locked:
			out, sent, err = j.appendOptimistic(ctx, build)
			if errors.Is(err, eventlog.ErrStale) {
				// Another writer got in first (posts to a busy session can keep doing so): build
				// again on the head read under the counter row's lock, once, instead of losing
				// the race again. A build that needs an up-to-date view (a claim) still answers
				// ErrStale there, and the caller reads what it missed.
				locked = true
				continue
			}
		default:
			out, sent, err = j.appendLocked(ctx, build)
		}
		if err == nil {
			r.done(ctx, "append")
			break
		}
		if !r.again(ctx, err, "append") {
			break
		}
	}
	if err != nil || len(out) == 0 {
		return nil, err
	}
	j.track(out)
	j.saw(out)
	j.store.committed(j.tenant, j.session, out)
	if observe != nil {
		observe.Observe(j.session, out[len(out)-1].Seq, gen)
	}
	return out, nil
}

// observer is what a journal needs of a hub to record its own commits (Hub.Observe).
type observer interface {
	Gen() uint64
	Observe(sessionID uuid.UUID, seq int64, gen uint64)
}

// observer returns the hub to tell of the commit of an append that starts now, with its
// generation: only while the journal is open (subscribed since before the append).
func (j *Journal) observer() (uint64, observer) {
	o, ok := j.hub.(observer)
	if !ok || j.unsub == nil {
		return 0, nil
	}
	return o.Gen(), o
}

// appendOptimistic appends at the known head. sent is the batch when its statement failed with a
// transient error (it may have committed).
func (j *Journal) appendOptimistic(ctx context.Context, build eventlog.BuildFunc) (_ []eventlog.Event, sent *appendParams, _ error) {
	h := j.head
	p, err := j.store.buildAt(ctx, j.store.pool, j.tenant, j.session, h, j.owner, build)
	if err != nil || len(p.Batch) == 0 {
		return nil, nil, err
	}
	p.Release = j.releaseAtTurnEnd && endsTurn(p.Batch)
	// The seqs this append takes are known before it runs: publish them first, so that the
	// notification of the commit, which may arrive before the append returns, reads as this
	// journal's own and not as news (Seen).
	j.next.Store(h.Next + int64(len(p.Batch)))
	released, err := appendRows(ctx, j.store.pool, p)
	if err == nil {
		if released {
			j.released.Store(true)
		}
		return p.Batch, nil, nil
	}
	j.next.Store(h.Next)
	if transient(err) {
		return nil, &p, err
	}
	if !errors.Is(err, errNoRow) {
		return nil, nil, err
	}
	return nil, nil, j.refused(ctx, h)
}

// refused tells why an append at h matched no counter row: the lease is another's, the log moved
// on, or the batch's inbox splices do not fit.
func (j *Journal) refused(ctx context.Context, h eventlog.Head) error {
	cur, err := j.store.head(ctx, j.store.pool, j.tenant, j.session, false)
	if err != nil {
		return err
	}
	if err := j.fence(cur); err != nil {
		return err
	}
	if cur.Next != h.Next {
		return fmt.Errorf("%w (the log ends at %d, not %d)", eventlog.ErrStale, cur.Last(), h.Last())
	}
	return &eventlog.ValidationError{Seq: h.Next, Rule: "LOOP-1", Reason: "the batch's inbox splices do not fit the inbox"}
}

// resend finishes an append whose statement failed with its outcome unknown: it reads the batch
// back and, when it did not commit, sends it again for the same head.
func (j *Journal) resend(ctx context.Context, p appendParams) (_ []eventlog.Event, sent *appendParams, _ error) {
	h := p.Head
	j.next.Store(h.Next + int64(len(p.Batch)))
	out, err := j.committedAs(ctx, p)
	if out != nil || err != nil {
		if err != nil {
			j.next.Store(h.Next)
			return nil, &p, err
		}
		return out, nil, nil
	}
	released, err := appendRows(ctx, j.store.pool, p)
	switch {
	case err == nil:
		if released {
			j.released.Store(true)
		}
		return j.adopt(p), nil, nil
	case transient(err):
		j.next.Store(h.Next)
		return nil, &p, err
	case errors.Is(err, errNoRow):
		// Refused: another writer got in first, the lease is another's, or the lost statement
		// committed after all (since the read-back).
		if out, err := j.committedAs(ctx, p); out != nil || err != nil {
			if err != nil {
				j.next.Store(h.Next)
				return nil, &p, err
			}
			return out, nil, nil
		}
		j.next.Store(h.Next)
		return nil, nil, j.refused(ctx, h)
	default:
		j.next.Store(h.Next)
		return nil, nil, err
	}
}

// committedAs reads the batch of p back: its events when it committed, nil when not.
func (j *Journal) committedAs(ctx context.Context, p appendParams) ([]eventlog.Event, error) {
	ok, owner, err := appendOutcome(ctx, j.store.pool, p)
	if err != nil || !ok {
		return nil, err
	}
	// A batch that was to release the lease did when its owner no longer holds it (a followup
	// waiting after it keeps the lease with its owner).
	if p.Release && (owner == nil || j.owner == nil || *owner != *j.owner) {
		j.released.Store(true)
	}
	j.store.logger.InfoContext(ctx, "eventlog: an append whose reply was lost had committed",
		"session", j.session, "seq", p.Head.Next, "events", len(p.Batch))
	return j.adopt(p), nil
}

// adopt makes the head of a batch committed by resend the journal's known head (when it was not:
// the first append, of appendLocked).
func (j *Journal) adopt(p appendParams) []eventlog.Event {
	if !j.known && j.owner != nil {
		j.head, j.known = p.Head, true
	}
	return p.Batch
}

// appendLocked locks the counter row, reads the head, builds and appends in one transaction.
// sent is the batch when the transaction's commit failed with a transient error (it may have
// committed); a failure before the commit leaves nothing committed.
func (j *Journal) appendLocked(ctx context.Context, build eventlog.BuildFunc) (_ []eventlog.Event, sent *appendParams, _ error) {
	var (
		p       appendParams
		written bool  // the append statement ran: only the commit remained
		own     error // the fence's or the build's error: returned as is, not as a database error
	)
	err := j.store.inTx(ctx, "append", func(tx pgx.Tx) error {
		written = false
		h, err := j.store.head(ctx, tx, j.tenant, j.session, true)
		if err != nil {
			return err
		}
		if own = j.fence(h); own != nil {
			return own
		}
		p, err = j.store.buildAt(ctx, tx, j.tenant, j.session, h, j.owner, func(h eventlog.Head) ([]eventlog.NewEvent, error) {
			evs, err := build(h)
			own = err
			return evs, err
		})
		if err != nil || len(p.Batch) == 0 {
			return err
		}
		p.Release = j.owner != nil && j.releaseAtTurnEnd && endsTurn(p.Batch)
		released, err := appendRows(ctx, tx, p)
		if err != nil {
			return err
		}
		written = true
		if released {
			j.released.Store(true) // takes effect with the commit; a failed commit is resent
		}
		return nil
	})
	if own != nil {
		return nil, nil, own
	}
	if err != nil {
		if written && transient(err) {
			return nil, &p, err
		}
		return nil, nil, err
	}
	if len(p.Batch) > 0 && j.owner != nil {
		// A runner's journal knows the head from here on; an unfenced writer stays pessimistic
		// (it cannot know what the runner appends).
		j.head, j.known = p.Head, true
	}
	return p.Batch, nil, nil
}

// RetryBound is how long an append or read of the journal may keep retrying while the database
// is unavailable (0 for an unfenced journal, which does not retry): a caller that bounds a write
// adds it to its bound.
func (j *Journal) RetryBound() time.Duration {
	if j.owner == nil {
		return 0
	}
	return j.store.retry
}

// retrier returns the retry policy of one append or read: a fenced journal's retries transient
// errors for the store's RetryUnavailable, an unfenced journal's does not retry.
func (j *Journal) retrier() *retrier {
	return &retrier{bound: j.RetryBound(), logger: j.store.logger, session: j.session}
}

// Bounds of the backoff between retries while the database is unavailable.
const (
	retryFirst = 50 * time.Millisecond
	retryMax   = time.Second
)

// retrier paces the retries of one operation while the database is unavailable.
type retrier struct {
	bound   time.Duration
	logger  *slog.Logger
	session uuid.UUID
	since   time.Time // the first failure
	wait    time.Duration
	tries   int
}

// again waits before another try of what failed with err, and reports whether to try: only when
// err is transient (fault.Unavailable), ctx is not done and the bound has not passed since the
// first failure.
func (r *retrier) again(ctx context.Context, err error, what string) bool {
	if r.bound <= 0 || !errors.Is(err, fault.ErrUnavailable) || ctx.Err() != nil {
		return false
	}
	if r.tries == 0 {
		r.since = time.Now()
		r.logger.WarnContext(ctx, "eventlog: database unavailable; retrying", "what", what, "session", r.session,
			"for", r.bound, "error", err)
	}
	r.tries++
	if time.Since(r.since) >= r.bound {
		r.logger.ErrorContext(ctx, "eventlog: database unavailable; giving up", "what", what, "session", r.session,
			"after", time.Since(r.since).Round(time.Millisecond), "tries", r.tries, "error", err)
		return false
	}
	r.wait = min(max(2*r.wait, retryFirst), retryMax)
	d := r.wait/2 + rand.N(r.wait/2+1) // jitter: replicas do not retry in step
	t := time.NewTimer(min(d, r.bound-time.Since(r.since)+time.Millisecond))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// done logs the recovery of an operation that was retried, once it succeeded. Its lines, like
// again's, are logged with the operation's context: a turn's carry its trace id.
func (r *retrier) done(ctx context.Context, what string) {
	if r.tries == 0 {
		return
	}
	r.logger.InfoContext(ctx, "eventlog: database available again", "what", what, "session", r.session,
		"after", time.Since(r.since).Round(time.Millisecond), "tries", r.tries)
	r.tries, r.wait = 0, 0
}

func (j *Journal) fence(h eventlog.Head) error {
	if j.owner != nil && h.Lease.Owner != j.owner.String() {
		return eventlog.ErrLeaseLost
	}
	return nil
}

// track advances the known head over committed events that follow it.
func (j *Journal) track(evs []eventlog.Event) {
	if !j.known {
		return
	}
	for _, ev := range evs {
		if ev.Seq != j.head.Next {
			continue
		}
		j.head.Next++
		if ev.Type == eventlog.TypeInboxSpliced {
			if s, err := eventlog.View[eventlog.InboxSpliced](ev); err == nil {
				j.head.Inbox, _ = j.head.Inbox.Apply(s)
			}
		} else if ev.Type == eventlog.TypeSessionEndSeed {
			j.head.Inbox = eventlog.InboxLens{}
		}
	}
	j.next.Store(j.head.Next)
}

// readPage is how many events Since reads per query.
const readPage = 1000

// Since implements eventlog.Journal. A fenced journal that reads from the start knows the head
// from then on.
func (j *Journal) Since(ctx context.Context, after int64) ([]eventlog.Event, error) {
	if after < 0 && !j.known && j.owner != nil {
		j.head, j.known = eventlog.Head{}, true
	}
	if seed := j.seed; seed != nil {
		j.seed = nil
		if len(seed) > 0 && seed[0].Seq == after+1 {
			out := slices.Clone(seed)
			j.track(out)
			j.saw(out)
			return out, nil
		}
	}
	var out []eventlog.Event
	r := j.retrier()
	for {
		page, err := j.store.EventList(ctx, j.tenant, j.session, ListQuery{After: after, Limit: readPage})
		if err != nil {
			if r.again(ctx, err, "read") {
				continue
			}
			return nil, err
		}
		r.done(ctx, "read")
		out = append(out, page...)
		if len(page) < readPage {
			break
		}
		after = page[len(page)-1].Seq
	}
	j.track(out)
	j.saw(out)
	return out, nil
}

// saw records that evs are committed (the journal appended or read them), for Latest.
func (j *Journal) saw(evs []eventlog.Event) {
	if len(evs) == 0 {
		return
	}
	n := evs[len(evs)-1].Seq + 1
	for {
		cur := j.done.Load()
		if n <= cur || j.done.CompareAndSwap(cur, n) {
			return
		}
	}
}

// Latest implements eventlog.Journal: the highest seq notified (with a hub) or that the journal
// appended or read, fenced or not. Unlike Seen it never counts the seqs of an append still
// running: they may never commit, and Since cannot return them yet.
func (j *Journal) Latest() int64 {
	own := j.done.Load() - 1
	if j.hub != nil {
		if seq, ok := j.hub.Latest(j.session); ok && seq > own {
			return seq
		}
	}
	return own
}

// waitPoll is how often Wait reads the counter when the journal has no hub.
const waitPoll = 100 * time.Millisecond

// Wait implements eventlog.Journal.
func (j *Journal) Wait(ctx context.Context, after int64) error {
	if j.hub == nil {
		for {
			last, err := j.readLast(ctx)
			if err != nil || last > after {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(waitPoll):
			}
		}
	}
	wake, unsub := j.hub.Subscribe(j.session)
	defer unsub()
	for {
		if seq, ok := j.hub.Latest(j.session); ok {
			if seq > after {
				j.settle(ctx)
				return nil
			}
		} else {
			// The hub does not vouch for this session yet (subscribed just now, or it forgot
			// after a reconnect or heartbeat, when notifications may have been lost): read the
			// counter.
			last, err := j.readLast(ctx)
			if err != nil || last > after {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		}
	}
}

// settleBound bounds how long Wait waits for a commit of this process to be published.
const settleBound = time.Second

// settle waits, when this process is committing to the session (an append or a post in flight),
// until that commit has been published (OnCommit): a follower woken by its notification then
// finds its cursor moved by the publication and need not read back what it would read.
func (j *Journal) settle(ctx context.Context) {
	ch := j.store.flying.settled(j.session)
	if ch == nil {
		return
	}
	t := time.NewTimer(settleBound)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	}
}

// Session returns the id of the journal's session.
func (j *Journal) Session() uuid.UUID { return j.session }

func endsTurn(batch []eventlog.Event) bool {
	return len(batch) > 0 && batch[len(batch)-1].Type == eventlog.TypeTurnEnd
}

// readLast reads the session's last seq for Wait. The query is not cut by ctx (pgx closes a
// connection whose query is cancelled, and a follower that stops while it reads would cost the
// pool a connection, and PostgreSQL a new backend, every time); it is bounded instead, and ctx is
// honoured as soon as it returns.
func (j *Journal) readLast(ctx context.Context) (int64, error) {
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
	defer cancel()
	last, err := lastSeq(qctx, j.store.pool, j.tenant, j.session)
	if ctx.Err() != nil {
		return last, ctx.Err()
	}
	return last, err
}

// readTimeout bounds a follower's read of the log.
const readTimeout = 30 * time.Second
