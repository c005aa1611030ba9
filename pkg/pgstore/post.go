package pgstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
)

// ErrIdempotencyConflict is returned by Post when the idempotency key was used before with
// another request.
var ErrIdempotencyConflict = &fault.Error{Code: fault.IdempotencyConflict,
	Message: "the Idempotency-Key was used before with a different request"}

// Idempotency makes a Post safe to retry: the first Post with Key records its result in the same
// transaction; a later one with the same Key and Hash returns that result and appends nothing.
type Idempotency struct {
	Key  string
	Hash []byte // a digest of the request (session, mode, content)
}

// PostParams is one posted message: what to append (build, given the locked head), whether to
// wake the session (Queue non-nil), and the idempotency key.
type PostParams struct {
	Tenant, Session uuid.UUID
	Build           eventlog.BuildFunc
	// Queue, when not nil, gets a wake job of the session in the same transaction.
	Queue *Queue
	// Idem, when not nil, makes the post idempotent.
	Idem *Idempotency
	// Message is the id of the posted message, recorded with the idempotency key.
	Message string
	// Bound bounds the session's pending inbox (checked under the counter row lock).
	Bound InboxBound
	// Trace is the traceparent the wake job carries when the post enqueues one (Wake.Trace).
	Trace string
	// Lease, when not nil, offers to take the session's run lease in the same transaction
	// instead of enqueueing a wake: the caller serves the session itself (Posted.Leased). When
	// the lease is held, nothing is taken or enqueued (a turn runs, and its runner serves what
	// waits before it releases); when the tenant runs Lease.MaxTenant turns already, the wake is
	// enqueued as without an offer (postWake). A post that offers the lease (without Idem,
	// Prepare or WakeIf) is first tried as a post to an idle session (postIdle), built for an
	// empty inbox before the log is read: its Build must depend on the head only through the
	// inbox lengths, as an insertion at the end of a list does.
	Lease *LeaseOffer
	// Runnable refuses (fault.NoPreset) a post to a session that has no preset to run, checked
	// with the head: the caller need not read the session first.
	Runnable bool
	// Prepare, when not nil, runs in the post's transaction under the counter row lock, after the
	// inbox bound's count check and before Build: r reads the session's events as they are under
	// that lock (no append can come between), so that what Build appends may depend on them (an
	// approval policy notice replacing an unread one, approval.PolicyChange). Its error is
	// returned as is and nothing is appended.
	Prepare func(ctx context.Context, r EventReader) error
	// Busy says that the caller knows the session's lease to be held (this replica serves it): the
	// post does not try the path of an idle session first (postIdle).
	Busy bool
	// WakeIf, when not nil, is asked after Build whether the post wakes the session through
	// Queue: false appends without scheduling work (a cancel wakes only a parked turn, whose
	// Prepare found it parked; a running turn's holder sees the cancel without a wake).
	WakeIf func() bool
}

// InboxBound bounds a session's pending inbox, both lists together: a post that would make it hold
// more than Messages messages or Bytes bytes (of their JSON) is refused (fault.InboxFull) and
// appends nothing. Zero fields: no bound. A waking post to a session with no lease and no
// queued wake is accepted beyond the bound: it is what serves (and empties) an inbox filled with
// injected or parked messages.
type InboxBound struct {
	Messages int
	Bytes    int64
}

// inboxFull is the error of a post refused by the session's inbox bound.
func inboxFull(msgs int, bytes int64, b InboxBound) error {
	return &fault.Error{Code: fault.InboxFull, Message: fmt.Sprintf(
		"the session's inbox holds %d messages (%d bytes) waiting; its bound is %d messages and %d bytes: retry once its turns have taken some",
		msgs, bytes, b.Messages, b.Bytes)}
}

// LeaseOffer is the lease a poster takes to serve the session at once.
type LeaseOffer struct {
	Owner     uuid.UUID
	TTL       time.Duration
	MaxTenant int // turns the tenant may run at once, on all replicas (takeLease); <= 0: no bound
}

// Posted is the result of a Post: the message id and the seq of the first appended event.
// Replayed is true when an idempotent retry returned an earlier result (nothing was appended).
type Posted struct {
	MessageID string
	Seq       int64
	Replayed  bool
	Events    []eventlog.Event
	// Leased is true when the poster took the session's lease (PostParams.Lease): it must serve
	// the session now; no wake was enqueued.
	Leased bool
	// Head is the head after the append (with the lease when Leased).
	Head eventlog.Head
	// Preset and PresetVersion are the session's pinned preset, read with the head (nil and 0 for
	// a replayed post).
	Preset        *uuid.UUID
	PresetVersion int
	// tookOver: Leased, and the lease taken was an expired holder's (metrics).
	tookOver bool
}

// Post appends what p.Build returns and schedules its work (postWake: the lease's holder, the
// lease taken by the poster, or the session's one wake job), in one transaction: a message is
// never accepted without work scheduled for it (a held lease is such work: if its holder dies,
// the lease sweeper wakes the session).
func (s *Store) Post(ctx context.Context, p PostParams) (Posted, error) {
	if p.Queue != nil && p.Lease != nil {
		if err := s.ensureSlots(ctx, p.Tenant, p.Lease.MaxTenant); err != nil {
			return Posted{}, err
		}
	}
	s.flying.begin(p.Session)
	defer s.flying.end(p.Session)
	if out, ok, err := s.postIdle(ctx, p); ok || err != nil {
		return out, err
	}
	var out Posted
	err := s.inTx(ctx, "post", func(tx pgx.Tx) error {
		if p.Idem != nil {
			prev, found, err := idempotencyClaim(ctx, tx, p.Tenant, p.Session, p.Idem)
			if err == nil && found {
				err = sessionLive(ctx, tx, p.Tenant, p.Session) // a replay answers 404 once the session is gone
			}
			if err != nil || found {
				out = prev
				return err
			}
		}
		h, st, err := postHead(ctx, tx, p.Tenant, p.Session)
		if err != nil {
			return err
		}
		if p.Runnable && st.preset == nil {
			return ErrNoPreset
		}
		// The inbox bound, under the counter row lock: the count before building, the bytes
		// once the message's size is known (a refusal rolls the append back).
		pending := h.Inbox.NextTurn + h.Inbox.NextStep
		bounded := !(p.Queue != nil && !st.held && !st.queued)
		if bounded && p.Bound.Messages > 0 && pending >= p.Bound.Messages {
			return inboxFull(pending, st.bytes, p.Bound)
		}
		if p.Prepare != nil {
			if err := p.Prepare(ctx, txReader{tx, p.Session}); err != nil {
				return err
			}
		}
		evs, err := s.appendAt(ctx, tx, p.Tenant, p.Session, h, nil, p.Build)
		if err != nil {
			return err
		}
		if z := inboxSizes(evs); bounded && p.Bound.Bytes > 0 && len(z.turn.inserted)+len(z.step.inserted) > 0 {
			added := int64(0)
			for _, n := range slices.Concat(z.turn.inserted, z.step.inserted) {
				added += int64(n)
			}
			if st.bytes+added > p.Bound.Bytes {
				return inboxFull(pending, st.bytes, p.Bound)
			}
		}
		out = Posted{MessageID: p.Message, Events: evs, Head: h, Preset: st.preset, PresetVersion: st.presetVersion}
		out.Head.Next += int64(len(evs))
		out.Head.Inbox, _ = h.Inbox.After(evs)
		if len(evs) > 0 {
			out.Seq = evs[0].Seq
		}
		wake := p
		if p.WakeIf != nil && !p.WakeIf() {
			wake.Queue = nil
		}
		if err := s.postWake(ctx, tx, wake, st, &out); err != nil {
			return err
		}
		if p.Idem != nil {
			_, err = tx.Exec(ctx, `UPDATE idempotency_keys SET message_id = $3, seq = $4 WHERE tenant_id = $1 AND key = $2`,
				p.Tenant, p.Idem.Key, out.MessageID, out.Seq)
		}
		return err
	})
	if err != nil {
		return Posted{}, err
	}
	if !out.Replayed {
		s.committed(p.Tenant, p.Session, out.Events)
	}
	if out.tookOver {
		s.metrics.LeaseTakeover()
	}
	return out, nil
}

// wakeFresh is how long an enqueued wake job counts as queued (session_counters.wake_queued_at):
// a job snoozing for its tenant's bound refreshes it; one retrying after errors for longer no
// longer keeps posts from enqueueing another.
const wakeFresh = time.Minute

// runState is what a post needs to know of the session's run, read with its head under the
// counter row lock (the database's clock decides whether the lease is live).
type runState struct {
	held   bool  // a run lease is recorded, live or expired
	live   bool  // ... and it has not expired
	wake   bool  // run_wake is already set
	queued bool  // a wake job is queued (wake_queued_at is fresh)
	bytes  int64 // the size of the waiting messages (migration 00008)

	preset        *uuid.UUID // the session's pinned preset (nil: none)
	presetVersion int
}

// postHead reads the session's head and run state, locking its counter row. ErrNotFound unless
// the session is the tenant's and live.
func postHead(ctx context.Context, tx pgx.Tx, tenantID, sessionID uuid.UUID) (eventlog.Head, runState, error) {
	var (
		h     eventlog.Head
		st    runState
		last  int64
		owner *uuid.UUID
		until *time.Time
	)
	err := tx.QueryRow(ctx, `SELECT c.last_seq, c.inbox_next_turn, c.inbox_next_step, c.run_owner, c.run_lease_until,
			COALESCE(c.run_lease_until > now(), false), c.run_wake,
			COALESCE(c.wake_queued_at > now() - $3 * interval '1 millisecond', false),
			(SELECT COALESCE(sum(x), 0) FROM unnest(c.inbox_next_turn_sizes || c.inbox_next_step_sizes) x),
			s.preset_id, COALESCE(s.preset_version, 0)
		FROM session_counters c JOIN sessions s ON s.id = c.session_id
		WHERE c.session_id = $1 AND s.tenant_id = $2 AND s.deleted_at IS NULL
		FOR UPDATE OF c`, sessionID, tenantID, wakeFresh.Milliseconds()).
		Scan(&last, &h.Inbox.NextTurn, &h.Inbox.NextStep, &owner, &until, &st.live, &st.wake, &st.queued, &st.bytes,
			&st.preset, &st.presetVersion)
	h.Next = last + 1
	if owner != nil && until != nil {
		h.Lease = eventlog.Lease{Owner: owner.String(), Until: *until}
		st.held = true
	}
	st.live = st.live && st.held
	return h, st, translate(err, "read head")
}

// postWake schedules the work of a waking post (nothing without a queue), in its transaction:
//
//   - the lease is live: its holder serves the message before it releases. The post sets
//     run_wake, so that the holder's release serves again (a steer may come after its last
//     step), and enqueues nothing: a flood of followups to a busy session is no flood of jobs.
//     If the holder dies, the lease sweeper's repair serves what waits.
//   - the lease is free or expired: the post takes it when offered and the tenant has a free turn
//     slot (the poster serves now), or else enqueues the session's wake job unless one is queued
//     already (wake_queued_at): a session has at most one waiting job. An expired holder that
//     comes back finds run_wake set.
func (s *Store) postWake(ctx context.Context, tx pgx.Tx, p PostParams, st runState, out *Posted) error {
	if p.Queue == nil {
		return nil
	}
	if st.live {
		if st.wake {
			return nil
		}
		_, err := tx.Exec(ctx, `UPDATE session_counters SET run_wake = true WHERE session_id = $1`, p.Session)
		return err
	}
	if l := p.Lease; l != nil {
		ok, _, err := takeLease(ctx, tx, p.Tenant, p.Session, l.Owner, l.TTL, l.MaxTenant, false)
		if err != nil {
			return err
		}
		if ok {
			out.Leased = true
			out.tookOver = st.held
			out.Head.Lease = eventlog.Lease{Owner: l.Owner.String(), Until: s.now().Add(l.TTL)}
			return nil
		}
	}
	setWake := st.held && !st.wake
	if setWake || !st.queued {
		_, err := tx.Exec(ctx, `UPDATE session_counters SET run_wake = run_wake OR $2,
			wake_queued_at = CASE WHEN $3 THEN now() ELSE wake_queued_at END WHERE session_id = $1`,
			p.Session, setWake, !st.queued)
		if err != nil {
			return err
		}
	}
	if st.queued {
		return nil
	}
	return p.Queue.wakeTx(ctx, tx, Wake{TenantID: p.Tenant, SessionID: p.Session, Reason: "message", Trace: p.Trace})
}

// idempotencyClaim records the key, or finds the earlier request that used it. Two concurrent
// requests with one key serialize on its primary key: the second waits for the first to commit
// and then replays its result.
func idempotencyClaim(ctx context.Context, tx pgx.Tx, tenantID, sessionID uuid.UUID, idem *Idempotency) (Posted, bool, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO idempotency_keys (tenant_id, key, request_hash, session_id)
		VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, tenantID, idem.Key, idem.Hash, sessionID)
	if err != nil || tag.RowsAffected() == 1 {
		return Posted{}, false, err
	}
	var (
		hash  []byte
		msgID *string
		seq   *int64
	)
	err = tx.QueryRow(ctx, `SELECT request_hash, message_id, seq FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`,
		tenantID, idem.Key).Scan(&hash, &msgID, &seq)
	if err != nil {
		return Posted{}, false, err
	}
	if !bytes.Equal(hash, idem.Hash) || msgID == nil || seq == nil {
		return Posted{}, false, ErrIdempotencyConflict
	}
	return Posted{MessageID: *msgID, Seq: *seq, Replayed: true}, true, nil
}

// IdempotencyExpire forgets idempotency keys older than age, of posts and of creates.
func (s *Store) IdempotencyExpire(ctx context.Context, age time.Duration) error {
	// The keys of creates (creates.go) expire with them, in the same statement.
	_, err := s.pool.Exec(ctx, `WITH creates AS (DELETE FROM idempotent_creates WHERE created_at < now() - $1 * interval '1 millisecond')
		DELETE FROM idempotency_keys WHERE created_at < now() - $1 * interval '1 millisecond'`, age.Milliseconds())
	return translate(err, "expire idempotency keys")
}

// ErrNoPreset is returned by a Runnable post to a session that has no preset to run its turns.
var ErrNoPreset = &fault.Error{Code: fault.NoPreset, Message: "the session has no preset to run its turns"}

// sessionLive answers ErrNotFound unless the session is the tenant's and not deleted.
func sessionLive(ctx context.Context, tx pgx.Tx, tenantID, sessionID uuid.UUID) error {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM sessions WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL`,
		sessionID, tenantID).Scan(&one)
	return translate(err, "read session")
}
