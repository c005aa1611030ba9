package pgstore

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/dshd/dshd/pkg/eventlog"
)

// EventReader reads one session's events inside a transaction of the store (PostParams.Prepare).
// The tenant has been checked.
type EventReader interface {
	// Since returns the events with seq > after, of the given types (all when nil), in order, at
	// most limit of them (all of them when limit <= 0).
	Since(ctx context.Context, after int64, types []string, limit int) ([]eventlog.Event, error)
	// Last returns the session's last event of type typ; ok is false when it has none.
	Last(ctx context.Context, typ string) (ev eventlog.Event, ok bool, err error)
	// Approval returns the approval/asked of approval id and its first approval/decided, if any
	// (none when the session has no such approval), in seq order (ApprovalEvents).
	Approval(ctx context.Context, id string) ([]eventlog.Event, error)
}

// txReader is the EventReader of a transaction.
type txReader struct {
	q       querier
	session uuid.UUID
}

func (r txReader) Since(ctx context.Context, after int64, types []string, limit int) ([]eventlog.Event, error) {
	return loadEvents(ctx, r.q, r.session, after, types, limit)
}

// Last reads the last event of typ by the index on (session_id, type, seq) (events_type_idx).
func (r txReader) Last(ctx context.Context, typ string) (eventlog.Event, bool, error) {
	rows, err := r.q.Query(ctx, `SELECT `+eventColumns+` FROM events WHERE session_id = $1 AND type = $2
		ORDER BY seq DESC LIMIT 1`, r.session, typ)
	if err != nil {
		return eventlog.Event{}, false, translate(err, "read last event")
	}
	evs, err := collectEvents(rows)
	if err != nil || len(evs) == 0 {
		return eventlog.Event{}, false, translate(err, "read last event")
	}
	return evs[0], true, nil
}

// Approval reads approval id's events by the primary key of approvals (approvalEventsSQL).
func (r txReader) Approval(ctx context.Context, id string) ([]eventlog.Event, error) {
	rows, err := r.q.Query(ctx, approvalEventsSQL, r.session, id)
	if err != nil {
		return nil, translate(err, "read approval")
	}
	evs, err := collectEvents(rows)
	return evs, translate(err, "read approval")
}

// approvalsPendingSQL reads the approval/asked events of the session's pending approvals, in
// the order they were asked, through the partial index approvals_pending (migration 00018): the
// rows read are the pending asks, whatever the number of decided ones.
const approvalsPendingSQL = `SELECT ` + eventColumns + ` FROM events
	WHERE session_id = $1 AND seq IN (SELECT asked_seq FROM approvals WHERE session_id = $1 AND decided_seq IS NULL)
	ORDER BY seq`

// approvalEventsSQL reads the approval/asked and the first approval/decided of approval $2, by
// the primary key of approvals.
const approvalEventsSQL = `SELECT ` + eventColumns + ` FROM events
	WHERE session_id = $1 AND seq IN (SELECT asked_seq FROM approvals WHERE session_id = $1 AND id = $2
		UNION ALL SELECT decided_seq FROM approvals WHERE session_id = $1 AND id = $2 AND decided_seq IS NOT NULL)
	ORDER BY seq`

// ApprovalsPending returns the approval/asked events of the session's approvals that are not
// decided, in the order they were asked. Its cost is the number of pending asks, not of the
// session's approvals. ErrNotFound for an unknown, another tenant's or a deleted session.
func (s *Store) ApprovalsPending(ctx context.Context, tenantID, sessionID uuid.UUID) ([]eventlog.Event, error) {
	return s.approvalRead(ctx, tenantID, sessionID, approvalsPendingSQL, sessionID)
}

// ApprovalEvents returns the approval/asked of approval id and its first approval/decided, if
// any (none when the session has no such approval), in seq order. ErrNotFound for an unknown,
// another tenant's or a deleted session.
func (s *Store) ApprovalEvents(ctx context.Context, tenantID, sessionID uuid.UUID, id string) ([]eventlog.Event, error) {
	return s.approvalRead(ctx, tenantID, sessionID, approvalEventsSQL, sessionID, id)
}

// approvalRead runs an approvals query for a live session of the tenant, in one snapshot.
func (s *Store) approvalRead(ctx context.Context, tenantID, sessionID uuid.UUID, sql string, args ...any) ([]eventlog.Event, error) {
	var out []eventlog.Event
	err := s.inReadTx(ctx, "read approvals", func(tx pgx.Tx) error {
		if err := sessionLive(ctx, tx, tenantID, sessionID); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		out, err = collectEvents(rows)
		return err
	})
	return out, err
}

// EventsBefore returns the session's events of the given types with seq < before, newest
// first, at most limit of them. It reads backwards from before, so its cost is the events
// between the two.
func (s *Store) EventsBefore(ctx context.Context, tenantID, sessionID uuid.UUID, before int64, types []string, limit int) ([]eventlog.Event, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+eventColumns+` FROM events
		WHERE session_id = $1 AND tenant_id = $2 AND seq < $3 AND type = ANY($4) ORDER BY seq DESC LIMIT $5`,
		sessionID, tenantID, before, types, limit)
	if err != nil {
		return nil, translate(err, "read events")
	}
	return collectEvents(rows)
}
