package eventlog

import (
	"context"
	"errors"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// appendSQL moves the counter by n and the inbox lengths by $12 and $13, inserts the rows and
// notifies, in one statement. It does nothing (no row) when the session is not the tenant's live
// session, when the new base seq would be below $4 (an event would cite a source that is not
// earlier, SES-3), when $5 is set and the counter moved since the caller read it, when $14 is set
// and is not the holder of the run lease, or when an inbox length would go negative.
const appendSQL = `
WITH c AS (
	UPDATE session_counters sc SET last_seq = sc.last_seq + $3,
		inbox_next_turn = sc.inbox_next_turn + $12, inbox_next_step = sc.inbox_next_step + $13
	FROM sessions s
	WHERE sc.session_id = $1 AND s.id = $1 AND s.tenant_id = $2 AND s.deleted_at IS NULL
	  AND sc.last_seq + 1 >= $4 AND ($5::bigint IS NULL OR sc.last_seq = $5)
	  AND ($14::uuid IS NULL OR sc.run_owner = $14)
	  AND sc.inbox_next_turn + $12 >= 0 AND sc.inbox_next_step + $13 >= 0
	RETURNING sc.last_seq
), ins AS (
	INSERT INTO events (session_id, seq, tenant_id, type, time, data, surface_op, source_event_seqs, ignorable)
	SELECT $1, c.last_seq - $3 + u.ord, $2, u.type, $6, u.data::json, u.op::json, u.src::bigint[], u.ign
	FROM c, unnest($7::text[], $8::text[], $9::text[], $10::text[], $11::bool[])
		WITH ORDINALITY AS u(type, data, op, src, ign, ord)
)
SELECT last_seq, pg_notify('` + NotifyChannel + `', $1::text || ':' || last_seq) FROM c`

// insertSQL inserts rows with explicit seqs and times (seeds, forks, repairs); the caller holds
// the counter row and moves it.
const insertSQL = `
INSERT INTO events (session_id, seq, tenant_id, type, time, data, surface_op, source_event_seqs, ignorable)
SELECT $1, u.seq, $2, u.type, u.time, u.data::json, u.op::json, u.src::bigint[], u.ign
FROM unnest($3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::text[], $9::bool[])
	AS u(seq, time, type, data, op, src, ign)`

// columns are the per-row arrays of a batch.
type columns struct {
	seqs, times     []int64
	types, datas    []string
	ops, srcs       []*string
	ignorable       []bool
	minBase, maxSeq int64
}

func toColumns(evs []Event) columns {
	c := columns{minBase: 0}
	for i, ev := range evs {
		c.seqs = append(c.seqs, ev.Seq)
		c.times = append(c.times, ev.Time)
		c.types = append(c.types, ev.Type)
		c.datas = append(c.datas, string(ev.Data))
		c.ignorable = append(c.ignorable, ev.Ignorable)
		var op, src *string
		if ev.SurfaceOp != nil {
			b, _ := ev.SurfaceOp.MarshalJSON()
			s := string(b)
			op = &s
		}
		if ev.SourceEventSeqs != nil {
			s := pgArray(ev.SourceEventSeqs)
			src = &s
		}
		c.ops = append(c.ops, op)
		c.srcs = append(c.srcs, src)
		// The event at base+i must be after every source it cites: base >= maxSource-i+1.
		c.minBase = max(c.minBase, maxSource(ev)-int64(i)+1)
	}
	return c
}

func pgArray(xs []int64) string {
	b := []byte{'{'}
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, x, 10)
	}
	return string(append(b, '}'))
}

// insertEvents inserts complete events (seqs and times set) of a session whose counter the caller
// holds and has already moved.
func insertEvents(ctx context.Context, q querier, tenantID, sessionID uuid.UUID, evs []Event) error {
	if len(evs) == 0 {
		return nil
	}
	c := toColumns(evs)
	_, err := q.Exec(ctx, insertSQL, sessionID, tenantID, c.seqs, c.times, c.types, c.datas, c.ops, c.srcs, c.ignorable)
	return err
}

// EventAppend validates evs and appends them to the session as one batch, in one transaction with
// one notification (all or nothing). It returns the committed events with their seqs and time.
// Errors: ErrNotFound (unknown, other tenant's or deleted session), *ValidationError (nothing was
// appended).
func (s *Store) EventAppend(ctx context.Context, tenantID, sessionID uuid.UUID, evs ...NewEvent) ([]Event, error) {
	out, err := s.appendVia(ctx, nil, tenantID, sessionID, evs)
	if err == nil {
		s.committed(tenantID, sessionID, out)
	}
	return out, err
}

// EventAppendTx is EventAppend inside the caller's transaction tx (the agent loop enqueues its
// jobs in the same transaction): the events become visible, and the notification is delivered,
// when tx commits. A validation failure leaves tx usable and unchanged; a database error leaves it
// for the caller to roll back.
func (s *Store) EventAppendTx(ctx context.Context, tx pgx.Tx, tenantID, sessionID uuid.UUID, evs ...NewEvent) ([]Event, error) {
	return s.appendVia(ctx, tx, tenantID, sessionID, evs)
}

func (s *Store) appendVia(ctx context.Context, tx pgx.Tx, tenantID, sessionID uuid.UUID, evs []NewEvent) ([]Event, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	batch, err := prepareBatch(evs)
	if err != nil {
		return nil, err
	}
	now := s.now().UnixMilli()
	if !hasReplace(batch) && !hasSplice(batch) && !s.check {
		var q querier = s.pool
		if tx != nil {
			q = tx
		}
		return s.appendFast(ctx, q, tenantID, sessionID, batch, now)
	}
	if tx != nil {
		return s.appendLocked(ctx, tx, tenantID, sessionID, batch, now)
	}
	var out []Event
	err = s.inTx(ctx, "append", func(tx pgx.Tx) error {
		var err error
		out, err = s.appendLocked(ctx, tx, tenantID, sessionID, batch, now)
		return err
	})
	return out, err
}

// appendFast appends a batch whose only log-dependent rule is "sources are earlier" in a single
// statement: the counter update carries that rule as a condition.
func (s *Store) appendFast(ctx context.Context, q querier, tenantID, sessionID uuid.UUID, batch []Event, now int64) ([]Event, error) {
	c := toColumns(batch)
	n := int64(len(batch))
	for attempt := 0; ; attempt++ {
		var last int64
		err := q.QueryRow(ctx, appendSQL, sessionID, tenantID, n, c.minBase, nil, now,
			c.types, c.datas, c.ops, c.srcs, c.ignorable, 0, 0, nil).Scan(&last, nil)
		if err == nil {
			stampBatch(batch, last-n+1, now)
			return batch, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, translate(err, "append")
		}
		// No row: the session is not there, or the batch cites sources that are not earlier.
		last, err = lastSeq(ctx, q, tenantID, sessionID, false)
		if err != nil {
			return nil, err
		}
		stampBatch(batch, last+1, now)
		if err := validateBatch(batch, nil, nil); err != nil || attempt >= 3 {
			if err == nil {
				err = translate(errors.New("the counter kept moving"), "append")
			}
			return nil, err
		}
	}
}

// lastSeq reads the session's counter, locking it when lock is set. ErrNotFound unless the
// session is the tenant's and live.
func lastSeq(ctx context.Context, q querier, tenantID, sessionID uuid.UUID, lock bool) (int64, error) {
	sql := `SELECT c.last_seq FROM session_counters c JOIN sessions s ON s.id = c.session_id
		WHERE c.session_id = $1 AND s.tenant_id = $2 AND s.deleted_at IS NULL`
	if lock {
		sql += ` FOR UPDATE OF c`
	}
	var last int64
	err := q.QueryRow(ctx, sql, sessionID, tenantID).Scan(&last)
	return last, translate(err, "read counter")
}

// appendLocked locks the counter row, validates the batch against what it needs from the log (the
// surface for a replacement, the whole log for the SES-10 checker), then appends.
func (s *Store) appendLocked(ctx context.Context, tx pgx.Tx, tenantID, sessionID uuid.UUID, batch []Event, now int64) ([]Event, error) {
	h, err := s.head(ctx, tx, tenantID, sessionID, true)
	if err != nil {
		return nil, err
	}
	return s.appendAtHead(ctx, tx, tenantID, sessionID, h, batch, now)
}

// appendAtHead validates and appends batch to a session whose counter row tx holds locked at head
// h.
func (s *Store) appendAtHead(ctx context.Context, tx pgx.Tx, tenantID, sessionID uuid.UUID, h Head, batch []Event, now int64) ([]Event, error) {
	last := h.LastSeq
	stampBatch(batch, last+1, now)
	lens, err := h.Inbox.after(batch)
	if err != nil {
		return nil, err
	}
	if s.check {
		prior, err := s.loadEvents(ctx, tx, sessionID, -1, nil, 0)
		if err != nil {
			return nil, err
		}
		if err := CheckInvariants(append(prior, batch...)); err != nil {
			return nil, err
		}
	}
	var sf *surface
	if hasReplace(batch) {
		if sf, err = loadSurface(ctx, tx, sessionID); err != nil {
			return nil, err
		}
	}
	lookup := func(seq int64) (Event, error) {
		if seq > last {
			return batch[seq-last-1], nil
		}
		return loadEvent(ctx, tx, sessionID, seq)
	}
	if err := validateBatch(batch, sf, lookup); err != nil {
		return nil, err
	}
	c := toColumns(batch)
	n := int64(len(batch))
	var got int64
	err = tx.QueryRow(ctx, appendSQL, sessionID, tenantID, n, c.minBase, last, now,
		c.types, c.datas, c.ops, c.srcs, c.ignorable,
		lens.NextTurn-h.Inbox.NextTurn, lens.NextStep-h.Inbox.NextStep, nil).Scan(&got, nil)
	if err != nil {
		return nil, translate(err, "append")
	}
	return batch, nil
}
