package pgstore

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
)

// SessionState is what a session's status is derived from (api: idle, queued, running,
// waiting-approval): its head (lease and inbox lengths), its last turn and the approvals that
// wait in that turn while it is open.
type SessionState struct {
	Head eventlog.Head
	// LastTurn is the number of the last turn/start, 0 before the first; LastTurnSeq its seq
	// (-1 before the first).
	LastTurn    int
	LastTurnSeq int64
	// TurnOpen reports that the last turn has no turn/end yet.
	TurnOpen bool
	// PendingApprovals counts the approval/asked events of the open turn without an
	// approval/decided (0 when no turn is open).
	PendingApprovals int
}

// The boundaries are looked up with the type spelled as a literal, so that the partial index of
// migration 00002 (surface events and turn boundaries) serves the backward scans.
const sessionStateSQL = `
SELECT c.session_id, c.last_seq, c.inbox_next_turn, c.inbox_next_step, c.run_owner, c.run_lease_until,
       coalesce(ts.turn, 0), coalesce(ts.seq, -1), ts.seq IS NOT NULL AND coalesce(te.seq, -1) < ts.seq,
       coalesce(ap.pending, 0)
FROM session_counters c JOIN sessions s ON s.id = c.session_id
LEFT JOIN LATERAL (SELECT e.seq, (e.data->>'turn')::int AS turn FROM events e
    WHERE e.session_id = c.session_id AND e.type = 'turn/start' ORDER BY e.seq DESC LIMIT 1) ts ON true
LEFT JOIN LATERAL (SELECT e.seq FROM events e
    WHERE e.session_id = c.session_id AND e.type = 'turn/end' ORDER BY e.seq DESC LIMIT 1) te ON true
LEFT JOIN LATERAL (SELECT count(*) AS pending FROM events a
    WHERE a.session_id = c.session_id AND a.seq > ts.seq AND a.type = 'approval/asked'
      AND NOT EXISTS (SELECT 1 FROM events d WHERE d.session_id = a.session_id AND d.seq > a.seq
                      AND d.type = 'approval/decided' AND d.data->>'id' = a.data->>'id')
    ) ap ON ts.seq IS NOT NULL AND coalesce(te.seq, -1) < ts.seq
WHERE s.tenant_id = $1 AND c.session_id = ANY($2) AND s.deleted_at IS NULL`

// SessionStates returns the state of each of the tenant's live sessions among ids, in one query;
// ids that name no such session are left out.
func (s *Store) SessionStates(ctx context.Context, tenantID uuid.UUID, ids []uuid.UUID) (map[uuid.UUID]SessionState, error) {
	out := make(map[uuid.UUID]SessionState, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, sessionStateSQL, tenantID, ids)
	if err != nil {
		return nil, translate(err, "session states")
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id    uuid.UUID
			st    SessionState
			last  int64
			owner *uuid.UUID
			until *time.Time
		)
		if err := rows.Scan(&id, &last, &st.Head.Inbox.NextTurn, &st.Head.Inbox.NextStep, &owner, &until,
			&st.LastTurn, &st.LastTurnSeq, &st.TurnOpen, &st.PendingApprovals); err != nil {
			return nil, translate(err, "session states")
		}
		st.Head.Next = last + 1
		if owner != nil && until != nil {
			st.Head.Lease = eventlog.Lease{Owner: owner.String(), Until: *until}
		}
		out[id] = st
	}
	return out, translate(rows.Err(), "session states")
}

// TurnBefore returns the number of the last turn started before seq (0 when none was) and
// whether that turn was still open at seq. ErrNotFound unless the session is the tenant's and
// live.
func (s *Store) TurnBefore(ctx context.Context, tenantID, sessionID uuid.UUID, seq int64) (turn int, open bool, err error) {
	err = s.pool.QueryRow(ctx, `
SELECT coalesce(ts.turn, 0), ts.seq IS NOT NULL AND coalesce(te.seq, -1) < ts.seq
FROM sessions s
LEFT JOIN LATERAL (SELECT e.seq, (e.data->>'turn')::int AS turn FROM events e
    WHERE e.session_id = s.id AND e.type = 'turn/start' AND e.seq < $3 ORDER BY e.seq DESC LIMIT 1) ts ON true
LEFT JOIN LATERAL (SELECT e.seq FROM events e
    WHERE e.session_id = s.id AND e.type = 'turn/end' AND e.seq < $3 ORDER BY e.seq DESC LIMIT 1) te ON true
WHERE s.id = $1 AND s.tenant_id = $2 AND s.deleted_at IS NULL`, sessionID, tenantID, seq).Scan(&turn, &open)
	return turn, open, translate(err, "turn before")
}
