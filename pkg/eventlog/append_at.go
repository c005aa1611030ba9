package eventlog

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

func hasSplice(batch []Event) bool {
	for _, ev := range batch {
		if ev.Type == TypeInboxSpliced {
			return true
		}
	}
	return false
}

// spliceDeltas returns how the splices among evs move the inbox lengths.
func spliceDeltas(evs []Event) (turn, step int, err error) {
	var l InboxLens
	const big = 1 << 30 // start high so that fit checks pass: only the deltas matter here
	l.NextTurn, l.NextStep = big, big
	if l, err = l.after(evs); err != nil {
		return 0, 0, err
	}
	return l.NextTurn - big, l.NextStep - big, nil
}

// EventAppendAt appends evs for the session's turn runner in one statement, provided the log still
// ends at expectLast and, when owner is non-nil, owner holds the session's run lease. It fails with
// ErrMoved when other events were appended after expectLast (the runner reads them and builds its
// batch again) and ErrLeaseLost when owner lost the lease. The runner computes its splices from
// its own view of the log, which the expectLast condition proves current; the inbox lengths move
// accordingly. A batch with a surface replacement takes the locked path.
func (s *Store) EventAppendAt(ctx context.Context, tenantID, sessionID uuid.UUID, expectLast int64, owner *uuid.UUID, evs ...NewEvent) ([]Event, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	batch, err := prepareBatch(evs)
	if err != nil {
		return nil, err
	}
	now := s.now().UnixMilli()
	if hasReplace(batch) || s.check {
		var out []Event
		err := s.inTx(ctx, "append", func(tx pgx.Tx) error {
			h, err := s.head(ctx, tx, tenantID, sessionID, true)
			if err != nil {
				return err
			}
			if err := checkFence(h, expectLast, owner); err != nil {
				return err
			}
			out, err = s.appendAtHead(ctx, tx, tenantID, sessionID, h, batch, now)
			return err
		})
		if err == nil {
			s.committed(tenantID, sessionID, out)
		}
		return out, err
	}
	stampBatch(batch, expectLast+1, now)
	if err := validateBatch(batch, nil, nil); err != nil {
		return nil, err
	}
	dt, ds, err := spliceDeltas(batch)
	if err != nil {
		return nil, err
	}
	c := toColumns(batch)
	n := int64(len(batch))
	var last int64
	err = s.pool.QueryRow(ctx, appendSQL, sessionID, tenantID, n, c.minBase, expectLast, now,
		c.types, c.datas, c.ops, c.srcs, c.ignorable, dt, ds, owner).Scan(&last, nil)
	if err == nil {
		s.committed(tenantID, sessionID, batch)
		return batch, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, translate(err, "append")
	}
	h, err := s.head(ctx, s.pool, tenantID, sessionID, false)
	if err != nil {
		return nil, err
	}
	if err := checkFence(h, expectLast, owner); err != nil {
		return nil, err
	}
	return nil, &ValidationError{Seq: expectLast + 1, Rule: "LOOP-1", Reason: "the batch's inbox splices do not fit the inbox"}
}

func checkFence(h Head, expectLast int64, owner *uuid.UUID) error {
	if owner != nil && (h.Owner == nil || *h.Owner != *owner) {
		return ErrLeaseLost
	}
	if h.LastSeq != expectLast {
		return ErrMoved
	}
	return nil
}

// BuildFunc builds a batch for the head of the log it is given (called under the session's append
// lock; it may be called again if the transaction is retried).
type BuildFunc func(h Head) ([]NewEvent, error)

// EventAppendFunc locks the session's counter row, calls build with the head of the log (last seq,
// inbox lengths, lease) and appends what it returns, in one transaction. HTTP handlers use it to
// insert at the end of an inbox list or to clear it on cancel. A build error is returned as is.
func (s *Store) EventAppendFunc(ctx context.Context, tenantID, sessionID uuid.UUID, build BuildFunc) ([]Event, error) {
	var out []Event
	err := s.inTx(ctx, "append", func(tx pgx.Tx) error {
		var err error
		out, err = s.EventAppendFuncTx(ctx, tx, tenantID, sessionID, build)
		return err
	})
	if err == nil {
		s.committed(tenantID, sessionID, out)
	}
	return out, err
}

// EventAppendFuncTx is EventAppendFunc inside the caller's transaction (posting a message appends
// to the inbox and enqueues its job in one transaction).
func (s *Store) EventAppendFuncTx(ctx context.Context, tx pgx.Tx, tenantID, sessionID uuid.UUID, build BuildFunc) ([]Event, error) {
	h, err := s.head(ctx, tx, tenantID, sessionID, true)
	if err != nil {
		return nil, err
	}
	evs, err := build(h)
	if err != nil || len(evs) == 0 {
		return nil, err
	}
	batch, err := prepareBatch(evs)
	if err != nil {
		return nil, err
	}
	return s.appendAtHead(ctx, tx, tenantID, sessionID, h, batch, s.now().UnixMilli())
}

func prepareBatch(evs []NewEvent) ([]Event, error) {
	batch := make([]Event, len(evs))
	for i, ne := range evs {
		ev, v := prepare(ne)
		if v != nil {
			v.Index, v.Type = i, ne.Type
			return nil, v
		}
		batch[i] = ev
	}
	return batch, nil
}

// syncInbox recomputes the inbox lengths of a session from its splice events after its last
// `session/end-seed` (after a seed or a fork copied events in without going through an append).
// A fork's inbox starts empty: LOOP-1 rebuilds it from the splices after the seed, so the parent's
// waiting messages are not served again in the child.
func syncInbox(ctx context.Context, q querier, sessionID uuid.UUID) error {
	rows, err := q.Query(ctx, `SELECT seq, data FROM events WHERE session_id = $1 AND type = $2
		AND seq > COALESCE((SELECT max(seq) FROM events WHERE session_id = $1 AND type = $3), -1)
		ORDER BY seq`, sessionID, TypeInboxSpliced, TypeSessionEndSeed)
	if err != nil {
		return err
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		ev := Event{Type: TypeInboxSpliced}
		var data string
		err := r.Scan(&ev.Seq, &data)
		ev.Data = []byte(data)
		return ev, err
	})
	if err != nil {
		return err
	}
	l, err := InboxLens{}.after(evs)
	if err != nil {
		return err
	}
	_, err = q.Exec(ctx, `UPDATE session_counters SET inbox_next_turn = $2, inbox_next_step = $3 WHERE session_id = $1`,
		sessionID, l.NextTurn, l.NextStep)
	return err
}
