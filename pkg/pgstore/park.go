package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/dshd/dshd/pkg/eventlog"
)

// LeasePark gives up owner's lease of a session whose turn parked (E6) and schedules the deadline
// job of every wait in deadlines (ParkDeadline, at its Wait.DeadlineMs), in one transaction: a
// parked turn holds no lease and no turn slot (the slot is free once the lease it records is),
// and it is decided at its deadlines even when no answer comes. It writes no session.idle: the
// session is not idle.
//
// An answer appended while owner held the lease set run_wake and enqueued nothing (postWake): the
// holder must serve it. So when run_wake is set, LeasePark parks nothing: it clears run_wake,
// keeps the lease and reports false, and the holder serves again (its runner reads the answer).
// Messages posted meanwhile do not keep the lease by themselves: they wait for the answer's wake,
// as the turn cannot take them while it is parked. It reports true when the lease was given up;
// ErrLeaseLost when owner did not hold it.
func (q *Queue) LeasePark(ctx context.Context, st *Store, tenantID, sessionID, owner uuid.UUID, deadlines []ParkDeadline) (bool, error) {
	parked := false
	err := st.inTx(ctx, "park lease", func(tx pgx.Tx) error {
		var woken bool
		err := tx.QueryRow(ctx, `SELECT c.run_wake FROM session_counters c JOIN sessions s ON s.id = c.session_id
			WHERE c.session_id = $1 AND s.tenant_id = $2 AND c.run_owner = $3 FOR UPDATE OF c`,
			sessionID, tenantID, owner).Scan(&woken)
		if errors.Is(err, pgx.ErrNoRows) {
			return eventlog.ErrLeaseLost
		}
		if err != nil {
			return err
		}
		if woken {
			_, err := tx.Exec(ctx, `UPDATE session_counters SET run_wake = false WHERE session_id = $1`, sessionID)
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE session_counters SET run_owner = NULL, run_lease_until = NULL
			WHERE session_id = $1`, sessionID); err != nil {
			return err
		}
		parked = true
		return q.deadlinesTx(ctx, tx, deadlines)
	})
	if errors.Is(err, eventlog.ErrLeaseLost) {
		return false, eventlog.ErrLeaseLost // as is, unwrapped by the transaction's translation
	}
	return parked, err
}

// deadlinesTx schedules the deadline jobs in tx; a job whose args were scheduled before is not
// inserted again (ParkDeadline.InsertOpts).
func (q *Queue) deadlinesTx(ctx context.Context, tx pgx.Tx, deadlines []ParkDeadline) error {
	if len(deadlines) == 0 {
		return nil
	}
	params := make([]river.InsertManyParams, len(deadlines))
	for i, d := range deadlines {
		opts := d.InsertOpts()
		opts.ScheduledAt = time.UnixMilli(d.Wait.DeadlineMs)
		params[i] = river.InsertManyParams{Args: d, InsertOpts: &opts}
	}
	_, err := q.client.InsertManyTx(ctx, tx, params)
	return err
}
