package pgstore

import (
	"bytes"
	"context"
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
	// Lease, when not nil, offers to take the session's run lease in the same transaction
	// instead of enqueueing a wake: the caller serves the session itself (Posted.Leased). When
	// the lease is held (a turn runs, and its runner serves what waits before it releases) or
	// the tenant runs Lease.MaxTenant turns already, the wake is enqueued as without an offer.
	Lease *LeaseOffer
}

// LeaseOffer is the lease a poster takes to serve the session at once.
type LeaseOffer struct {
	Owner     uuid.UUID
	TTL       time.Duration
	MaxTenant int // turns the tenant may run at once, on all replicas (takeSlot); <= 0: no bound
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
}

// Post appends what p.Build returns and, unless the poster takes the lease (p.Lease), enqueues
// the session's wake, in one transaction: a message is never accepted without work scheduled for
// it (the lease is such work: if its holder dies, the lease sweeper wakes the session).
func (s *Store) Post(ctx context.Context, p PostParams) (Posted, error) {
	if p.Queue != nil && p.Lease != nil {
		if err := s.ensureSlots(ctx, p.Tenant, p.Lease.MaxTenant); err != nil {
			return Posted{}, err
		}
	}
	var out Posted
	err := s.inTx(ctx, "post", func(tx pgx.Tx) error {
		if p.Idem != nil {
			prev, found, err := idempotencyClaim(ctx, tx, p.Tenant, p.Session, p.Idem)
			if err != nil || found {
				out = prev
				return err
			}
		}
		h, err := s.head(ctx, tx, p.Tenant, p.Session, true)
		if err != nil {
			return err
		}
		evs, err := s.appendAt(ctx, tx, p.Tenant, p.Session, h, nil, p.Build)
		if err != nil {
			return err
		}
		out = Posted{MessageID: p.Message, Events: evs, Head: h}
		out.Head.Next += int64(len(evs))
		out.Head.Inbox, _ = h.Inbox.After(evs)
		if len(evs) > 0 {
			out.Seq = evs[0].Seq
		}
		if err := s.postWake(ctx, tx, p, &out); err != nil {
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
	return out, nil
}

// postWake takes the offered lease or enqueues the session's wake (nothing without a queue).
func (s *Store) postWake(ctx context.Context, tx pgx.Tx, p PostParams, out *Posted) error {
	if p.Queue == nil {
		return nil
	}
	if l := p.Lease; l != nil {
		taken, err := postTakeLease(ctx, tx, p, l)
		if err != nil {
			return err
		}
		if taken {
			out.Leased = true
			out.Head.Lease = eventlog.Lease{Owner: l.Owner.String(), Until: s.now().Add(l.TTL)}
			return nil
		}
	}
	return p.Queue.wakeTx(ctx, tx, Wake{TenantID: p.Tenant, SessionID: p.Session, Reason: "message"})
}

// postTakeLease takes the offered lease in the post's transaction, which holds the session's
// counter row, if the lease is free or expired and the tenant has a free turn slot (takeSlot).
func postTakeLease(ctx context.Context, tx pgx.Tx, p PostParams, l *LeaseOffer) (bool, error) {
	var free bool
	err := tx.QueryRow(ctx, `SELECT run_owner IS NULL OR run_lease_until < now() FROM session_counters
		WHERE session_id = $1`, p.Session).Scan(&free)
	if err != nil || !free {
		return false, err
	}
	if ok, err := takeSlot(ctx, tx, p.Tenant, p.Session, l.Owner, l.MaxTenant); err != nil || !ok {
		return false, err
	}
	_, err = tx.Exec(ctx, `UPDATE session_counters SET run_owner = $2,
		run_lease_until = now() + $3 * interval '1 millisecond' WHERE session_id = $1`,
		p.Session, l.Owner, l.TTL.Milliseconds())
	return err == nil, err
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

// IdempotencyExpire forgets idempotency keys older than age.
func (s *Store) IdempotencyExpire(ctx context.Context, age time.Duration) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE created_at < now() - $1 * interval '1 millisecond'`, age.Milliseconds())
	return translate(err, "expire idempotency keys")
}
