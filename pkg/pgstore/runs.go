package pgstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// LeaseAcquire gives owner the session's run lease for ttl if it is free, expired or already
// owner's, whatever the tenant runs (LeaseTake applies the tenant's bound; this is for tools and
// tests). It reports whether owner holds the lease and, when not, until when the other holder's
// lease runs. ErrNotFound for an unknown, other tenant's or deleted session.
func (s *Store) LeaseAcquire(ctx context.Context, tenantID, sessionID, owner uuid.UUID, ttl time.Duration) (bool, time.Time, error) {
	var until time.Time
	err := s.pool.QueryRow(ctx, `
		UPDATE session_counters c SET run_owner = $3, run_lease_until = now() + $4 * interval '1 millisecond'
		FROM sessions s
		WHERE c.session_id = $1 AND s.id = $1 AND s.tenant_id = $2 AND s.deleted_at IS NULL
		  AND (c.run_owner IS NULL OR c.run_owner = $3 OR c.run_lease_until < now())
		RETURNING c.run_lease_until`, sessionID, tenantID, owner, ttl.Milliseconds()).Scan(&until)
	if err == nil {
		return true, until, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return false, time.Time{}, translate(err, "acquire lease")
	}
	h, err := s.head(ctx, s.pool, tenantID, sessionID, false)
	if err != nil {
		return false, time.Time{}, err
	}
	if h.Lease.Owner == "" { // released between the two statements: try again later
		return false, time.Time{}, nil
	}
	return false, h.Lease.Until, nil
}

// LeaseHold gives owner the session's run lease for ttl only when no one holds it, in one
// statement: a fork's hold (worker.Service.Hold). Unlike LeaseAcquire it refuses (false) a lease
// that has expired but is still recorded: its holder crashed mid-turn, and the turn must be
// repaired first (LeasesExpired finds it only while the dead owner stays recorded, which a
// takeover followed by a drop would undo). ErrNotFound for an unknown, other tenant's or
// deleted session.
func (s *Store) LeaseHold(ctx context.Context, tenantID, sessionID, owner uuid.UUID, ttl time.Duration) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `
		WITH cur AS (
			SELECT c.session_id, c.run_owner IS NULL AS free
			FROM session_counters c JOIN sessions s ON s.id = c.session_id
			WHERE c.session_id = $1 AND s.tenant_id = $2 AND s.deleted_at IS NULL FOR UPDATE OF c
		), took AS (
			UPDATE session_counters c SET run_owner = $3, run_lease_until = now() + $4 * interval '1 millisecond'
			FROM cur WHERE c.session_id = cur.session_id AND cur.free RETURNING 1
		)
		SELECT EXISTS (SELECT 1 FROM took) FROM cur`, sessionID, tenantID, owner, ttl.Milliseconds()).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, eventlog.ErrNotFound
	}
	if err != nil {
		return false, translate(err, "hold lease")
	}
	return ok, nil
}

// LeaseOutcome is what LeaseTake did.
type LeaseOutcome int

const (
	// LeaseTaken: the caller holds the lease now.
	LeaseTaken LeaseOutcome = iota
	// LeaseBusy: another holder's lease is live (LeaseTake's until says how long it runs).
	LeaseBusy
	// LeaseTenantFull: the lease is free but the tenant runs as many turns as it may.
	LeaseTenantFull
)

// LeaseTake is a wake job's take of the session's run lease: it gives owner the lease for ttl if
// it is free or expired and the tenant holds fewer than maxTenant live leases (no bound when
// maxTenant <= 0), the check and the take in one transaction that never waits for another
// taker's commit (takeLease). until is the other holder's expiry for LeaseBusy. ErrNotFound for an
// unknown, other tenant's or deleted session.
//
// Taken and busy, the job has run: the session's queued wake is cleared (the next post to an idle
// session enqueues another), and so is run_wake when taken (the new holder serves whatever
// waits). A busy lease's holder serves what waits before it releases (LeaseRelease), so the job
// is done. Refused for the tenant's bound, the job stays queued (it snoozes).
func (s *Store) LeaseTake(ctx context.Context, tenantID, sessionID, owner uuid.UUID, ttl time.Duration, maxTenant int) (_ LeaseOutcome, until time.Time, _ error) {
	if err := s.ensureSlots(ctx, tenantID, maxTenant); err != nil {
		return 0, time.Time{}, err
	}
	var out LeaseOutcome
	var takeover bool // the lease was held and has expired: its holder crashed or stalled
	err := s.inTx(ctx, "take lease", func(tx pgx.Tx) error {
		var live bool
		var cur *time.Time
		err := tx.QueryRow(ctx, `
			SELECT c.run_owner IS NOT NULL AND c.run_lease_until > now(), c.run_lease_until, c.run_owner IS NOT NULL
			FROM session_counters c JOIN sessions s ON s.id = c.session_id
			WHERE c.session_id = $1 AND s.tenant_id = $2 AND s.deleted_at IS NULL
			FOR UPDATE OF c`, sessionID, tenantID).Scan(&live, &cur, &takeover)
		if err != nil {
			return err
		}
		if live {
			out, until = LeaseBusy, *cur
			_, err := tx.Exec(ctx, `UPDATE session_counters SET wake_queued_at = NULL
				WHERE session_id = $1 AND wake_queued_at IS NOT NULL`, sessionID)
			return err
		}
		ok, at, err := takeLease(ctx, tx, tenantID, sessionID, owner, ttl, maxTenant, true)
		if err != nil {
			return err
		}
		if !ok {
			out = LeaseTenantFull
			_, err := tx.Exec(ctx, `UPDATE session_counters SET wake_queued_at = now() WHERE session_id = $1`, sessionID)
			return err
		}
		out, until = LeaseTaken, at
		return nil
	})
	if err != nil {
		return 0, time.Time{}, err
	}
	if out == LeaseTaken && takeover {
		s.metrics.LeaseTakeover()
	}
	return out, until, nil
}

// slotFree is the condition that the turn slot t records no live lease (tenant_turn_slots,
// migration 00006): the lease was released, expired or taken over by another owner.
const slotFree = `NOT EXISTS (SELECT 1 FROM session_counters h
	WHERE h.session_id = t.session_id AND h.run_owner = t.owner AND h.run_lease_until > now())`

// slotTries bounds how many slots takeLease locks before giving up (and the post enqueues a wake
// job instead): a slot that looked free to the locking statement may prove taken, by a taker
// that committed just before.
const slotTries = 8

// takeLease gives owner the session's run lease for ttl in tx, which holds the session's counter
// row, when the tenant has a free turn slot for it (no bound when max <= 0), and reports until
// when the lease runs (the database's clock). The slot's claim and the lease are one statement;
// the check and the claim are atomic: the slot stays locked until tx commits, and the lease
// recorded in it is live from then on. The take also clears run_wake (the new holder serves what
// waits), and wake_queued_at when clearQueued (a wake job's take: the job has run).
//
// It never waits: a slot locked by another taker is skipped (SKIP LOCKED), so one tenant's
// concurrent posts are not serialized through each other's commits. A slot is first locked, then
// checked free again by the statement that claims it and takes the lease: its snapshot is taken
// after the lock was granted, so it sees the lease of a taker that committed the slot just before
// (a single statement that locks and checks would recheck the locked row but not the lease it
// records). Lock order: the counter row, then slots.
func takeLease(ctx context.Context, tx pgx.Tx, tenantID, sessionID, owner uuid.UUID, ttl time.Duration, max int, clearQueued bool) (bool, time.Time, error) {
	var until time.Time
	if max <= 0 {
		err := tx.QueryRow(ctx, leaseSetSQL+` WHERE session_id = $1 RETURNING run_lease_until`,
			sessionID, owner, ttl.Milliseconds(), clearQueued).Scan(&until)
		return err == nil, until, err
	}
	tried := []int32{}
	from := rand.IntN(max) // concurrent takers start at different slots
	for range slotTries {
		var slot int32
		err := tx.QueryRow(ctx, `SELECT t.slot FROM tenant_turn_slots t
			WHERE t.tenant_id = $1 AND t.slot < $2 AND NOT t.slot = ANY($3) AND `+slotFree+`
			ORDER BY (t.slot + $4) % $2 LIMIT 1 FOR UPDATE OF t SKIP LOCKED`, tenantID, max, tried, from).Scan(&slot)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, time.Time{}, nil
		}
		if err != nil {
			return false, time.Time{}, err
		}
		err = tx.QueryRow(ctx, `WITH claim AS (
				UPDATE tenant_turn_slots t SET session_id = $1, owner = $2
				WHERE t.tenant_id = $5 AND t.slot = $6 AND `+slotFree+` RETURNING 1)
			`+leaseSetSQL+` WHERE session_id = $1 AND EXISTS (SELECT 1 FROM claim) RETURNING run_lease_until`,
			sessionID, owner, ttl.Milliseconds(), clearQueued, tenantID, slot).Scan(&until)
		if err == nil {
			return true, until, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return false, time.Time{}, err
		}
		tried = append(tried, slot) // taken by a taker that committed just before
	}
	return false, time.Time{}, nil
}

// leaseSetSQL records the lease ($2 for $3 ms) on a session's counter row (the caller adds the
// WHERE): run_wake is cleared, and wake_queued_at when $4.
const leaseSetSQL = `UPDATE session_counters SET run_owner = $2,
	run_lease_until = now() + $3 * interval '1 millisecond', run_wake = false,
	wake_queued_at = CASE WHEN $4::bool THEN NULL ELSE wake_queued_at END`

// ensureSlots creates the tenant's turn slots 0 .. max-1 once per store (they are never removed;
// slots past a lowered max are not used).
func (s *Store) ensureSlots(ctx context.Context, tenantID uuid.UUID, max int) error {
	if max <= 0 {
		return nil
	}
	if n, ok := s.slots.Load(tenantID); ok && n.(int) >= max {
		return nil
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO tenant_turn_slots (tenant_id, slot)
		SELECT $1, g FROM generate_series(0, $2 - 1) g ON CONFLICT DO NOTHING`, tenantID, max)
	if err != nil {
		return translate(err, "create turn slots")
	}
	s.slots.Store(tenantID, max)
	return nil
}

// LeaseRenew extends owner's lease by ttl from now; ErrLeaseLost when owner no longer holds it.
func (s *Store) LeaseRenew(ctx context.Context, tenantID, sessionID, owner uuid.UUID, ttl time.Duration) error {
	tag, err := s.pool.Exec(ctx, `
		UPDATE session_counters c SET run_lease_until = now() + $4 * interval '1 millisecond'
		FROM sessions s
		WHERE c.session_id = $1 AND s.id = $1 AND s.tenant_id = $2 AND c.run_owner = $3`,
		sessionID, tenantID, owner, ttl.Milliseconds())
	if err != nil {
		return translate(err, "renew lease")
	}
	if tag.RowsAffected() == 0 {
		return eventlog.ErrLeaseLost
	}
	return nil
}

// LeaseRelease gives up owner's lease unless a followup waits in the next-turn inbox or a waking
// message was posted since the holder began serving (run_wake, which it clears): the release and
// every append lock the same row, so a message appended before the release keeps the lease with
// its runner, which serves again, and one appended after finds the lease free. Messages in the
// next-step list do not keep it by themselves: contexts parked by a cancel and injected messages
// wait for the next wake (LOOP-1, LOOP-7). It reports whether the lease was released;
// ErrLeaseLost when owner did not hold it.
func (s *Store) LeaseRelease(ctx context.Context, tenantID, sessionID, owner uuid.UUID) (bool, error) {
	var released bool
	err := s.pool.QueryRow(ctx, `
		WITH cur AS (
			SELECT c.session_id, c.inbox_next_turn = 0 AND NOT c.run_wake AS idle, c.run_wake, c.last_seq
			FROM session_counters c JOIN sessions s ON s.id = c.session_id
			WHERE c.session_id = $1 AND s.tenant_id = $2 AND c.run_owner = $3 FOR UPDATE OF c
		), rel AS (
			UPDATE session_counters c SET run_wake = false,
				run_owner = CASE WHEN cur.idle THEN NULL ELSE c.run_owner END,
				run_lease_until = CASE WHEN cur.idle THEN NULL ELSE c.run_lease_until END
			FROM cur WHERE c.session_id = cur.session_id AND (cur.idle OR cur.run_wake)
			RETURNING c.session_id
		), hooks AS (
			-- session.idle to the tenant's subscribed endpoints (the outbox, derived.go: hookRows
			-- writes the same event, with the same id, when an append releases)
			INSERT INTO webhook_deliveries (id, endpoint_id, tenant_id, event_id, event_type, payload)
			-- ($4: the time as the append path writes it, Go's RFC 3339 UTC form to the millisecond)
			SELECT gen_random_uuid(), e.id, $2, ev.id, '`+WebhookSessionIdle+`',
				json_build_object('id', ev.id, 'type', '`+WebhookSessionIdle+`', 'createdAt', $4::json,
					'data', json_build_object('sessionId', $1::uuid, 'seq', cur.last_seq))
			FROM cur CROSS JOIN LATERAL (SELECT $1::text || ':' || cur.last_seq || ':`+WebhookSessionIdle+`' AS id) ev
				JOIN webhook_endpoints e ON e.tenant_id = $2 AND e.disabled_at IS NULL
					AND '`+WebhookSessionIdle+`' = ANY (e.events)
			WHERE cur.idle
			ON CONFLICT (endpoint_id, event_id) DO NOTHING
		)
		SELECT cur.idle FROM cur`, sessionID, tenantID, owner, hookTime(time.Now())).Scan(&released)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, eventlog.ErrLeaseLost
	}
	if err != nil {
		return false, translate(err, "release lease")
	}
	return released, nil
}

// LeaseDrop gives up owner's lease whatever waits in the inbox (a replica shutting down leaves the
// waiting messages to the jobs that other replicas run). Dropping a lease one does not hold is not
// an error.
func (s *Store) LeaseDrop(ctx context.Context, tenantID, sessionID, owner uuid.UUID) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE session_counters c SET run_owner = NULL, run_lease_until = NULL
		FROM sessions s WHERE c.session_id = $1 AND s.id = $1 AND s.tenant_id = $2 AND c.run_owner = $3`,
		sessionID, tenantID, owner)
	return translate(err, "drop lease")
}

// LeasesHeld counts the sessions of a tenant whose run lease is held and not expired: the turns
// the tenant runs now, on any replica.
func (s *Store) LeasesHeld(ctx context.Context, tenantID uuid.UUID) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `
		SELECT count(*) FROM session_counters c JOIN sessions s ON s.id = c.session_id
		WHERE s.tenant_id = $1 AND c.run_owner IS NOT NULL AND c.run_lease_until > now()`, tenantID).Scan(&n)
	return n, translate(err, "count leases")
}

// InboxPending returns how many messages wait in the session's inbox and their size in bytes (of
// their JSON), the quantities its inbox bound applies to (PostParams.Bound).
func (s *Store) InboxPending(ctx context.Context, tenantID, sessionID uuid.UUID) (msgs int, bytes int64, _ error) {
	err := s.pool.QueryRow(ctx, `SELECT c.inbox_next_turn + c.inbox_next_step,
			(SELECT COALESCE(sum(x), 0) FROM unnest(c.inbox_next_turn_sizes || c.inbox_next_step_sizes) x)
		FROM session_counters c JOIN sessions s ON s.id = c.session_id
		WHERE c.session_id = $1 AND s.tenant_id = $2 AND s.deleted_at IS NULL`, sessionID, tenantID).Scan(&msgs, &bytes)
	return msgs, bytes, translate(err, "read inbox")
}

// SessionRef names a session of a tenant.
type SessionRef struct {
	TenantID, SessionID uuid.UUID
}

// LeasesExpired returns up to limit sessions whose run lease has expired: their worker died
// mid-turn, and another must repair the turn and serve the inbox.
func (s *Store) LeasesExpired(ctx context.Context, limit int) ([]SessionRef, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT s.tenant_id, c.session_id FROM session_counters c JOIN sessions s ON s.id = c.session_id
		WHERE c.run_owner IS NOT NULL AND c.run_lease_until < now() AND s.deleted_at IS NULL
		ORDER BY c.run_lease_until LIMIT $1`, limit)
	if err != nil {
		return nil, translate(err, "expired leases")
	}
	refs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SessionRef, error) {
		var ref SessionRef
		return ref, r.Scan(&ref.TenantID, &ref.SessionID)
	})
	return refs, translate(err, "expired leases")
}

// SessionHead returns the session's head without locking it.
func (s *Store) SessionHead(ctx context.Context, tenantID, sessionID uuid.UUID) (eventlog.Head, error) {
	return s.head(ctx, s.pool, tenantID, sessionID, false)
}

// head reads the session's head, locking its counter row when lock is set (the session's append
// lock). ErrNotFound unless the session is the tenant's and live.
func (s *Store) head(ctx context.Context, q querier, tenantID, sessionID uuid.UUID, lock bool) (eventlog.Head, error) {
	sql := `SELECT c.last_seq, c.inbox_next_turn, c.inbox_next_step, c.run_owner, c.run_lease_until
		FROM session_counters c JOIN sessions s ON s.id = c.session_id
		WHERE c.session_id = $1 AND s.tenant_id = $2 AND s.deleted_at IS NULL`
	if lock {
		sql += ` FOR UPDATE OF c`
	}
	var (
		h     eventlog.Head
		last  int64
		owner *uuid.UUID
		until *time.Time
	)
	err := q.QueryRow(ctx, sql, sessionID, tenantID).Scan(&last, &h.Inbox.NextTurn, &h.Inbox.NextStep, &owner, &until)
	h.Next = last + 1
	if owner != nil && until != nil {
		h.Lease = eventlog.Lease{Owner: owner.String(), Until: *until}
	}
	return h, translate(err, "read head")
}
