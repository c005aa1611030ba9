package pgstore

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
)

// SessionState is what a session's status is derived from (api: idle, queued, running,
// waiting-approval, waiting-client): its head (lease and inbox lengths), its last turn, the
// approvals that wait in that turn while it is open, and its park while it is parked (E6).
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
	// Park is the open turn's park while it is parked (its last turn/parked has no turn/resumed
	// after it), read by eventlog.Parked; nil otherwise. A parked turn holds no lease, so the
	// head alone cannot tell it from a stalled one.
	Park *eventlog.Park
}

// The boundaries are looked up with the type spelled as a literal, so that the partial index of
// migration 00002 (surface events and turn boundaries) serves the backward scans. The last
// turn/parked or turn/resumed is looked for in the open turn only (a scan of the primary key back
// to its turn/start; nothing while no turn is open): when it is a turn/parked, the turn is parked.
const sessionStateSQL = `
SELECT c.session_id, c.last_seq, c.inbox_next_turn, c.inbox_next_step, c.run_owner, c.run_lease_until,
       coalesce(ts.turn, 0), coalesce(ts.seq, -1), ts.seq IS NOT NULL AND coalesce(te.seq, -1) < ts.seq,
       coalesce(ap.pending, 0), CASE WHEN pk.type = 'turn/parked' THEN pk.seq END
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
LEFT JOIN LATERAL (SELECT e.seq, e.type FROM events e
    WHERE e.session_id = c.session_id AND e.seq > ts.seq AND coalesce(te.seq, -1) < ts.seq
      AND e.type IN ('turn/parked', 'turn/resumed')
    ORDER BY e.seq DESC LIMIT 1) pk ON true
WHERE s.tenant_id = $1 AND c.session_id = ANY($2) AND s.deleted_at IS NULL`

// SessionStates returns the state of each of the tenant's live sessions among ids, in one query
// and, when some of them are parked, one more that reads their parks; ids that name no such
// session are left out.
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
	parked := map[uuid.UUID]int64{} // the seq of the last turn/parked of each parked session
	for rows.Next() {
		var (
			id     uuid.UUID
			st     SessionState
			last   int64
			owner  *uuid.UUID
			until  *time.Time
			parkAt *int64
		)
		if err := rows.Scan(&id, &last, &st.Head.Inbox.NextTurn, &st.Head.Inbox.NextStep, &owner, &until,
			&st.LastTurn, &st.LastTurnSeq, &st.TurnOpen, &st.PendingApprovals, &parkAt); err != nil {
			return nil, translate(err, "session states")
		}
		st.Head.Next = last + 1
		if owner != nil && until != nil {
			st.Head.Lease = eventlog.Lease{Owner: owner.String(), Until: *until}
		}
		if parkAt != nil {
			parked[id] = *parkAt
		}
		out[id] = st
	}
	if err := rows.Err(); err != nil {
		return nil, translate(err, "session states")
	}
	rows.Close()
	return out, s.parks(ctx, tenantID, parked, out)
}

// parkKinds are the kinds eventlog.Parked reads from a turn/parked on: the answers, the cancel
// and the boundaries that end a park.
var parkKinds = []string{eventlog.TypeTurnParked, eventlog.TypeTurnResumed, eventlog.TypeTurnStart,
	eventlog.TypeTurnEnd, eventlog.TypeApprovalDecided, eventlog.TypeClientResult, eventlog.TypeAgentCancel}

// parks fills the Park of the sessions of states whose open turn parked at the seq parked gives,
// in one query: the events of parkKinds from that turn/parked on, decoded in Go by
// eventlog.Parked (the SQL reads no JSON path of their data).
func (s *Store) parks(ctx context.Context, tenantID uuid.UUID, parked map[uuid.UUID]int64, states map[uuid.UUID]SessionState) error {
	if len(parked) == 0 {
		return nil
	}
	ids, seqs := make([]uuid.UUID, 0, len(parked)), make([]int64, 0, len(parked))
	for id, seq := range parked {
		ids, seqs = append(ids, id), append(seqs, seq)
	}
	rows, err := s.pool.Query(ctx, `
SELECT e.session_id, e.seq, e.type, e.time, e.data FROM unnest($2::uuid[], $3::bigint[]) AS p(session_id, seq)
JOIN events e ON e.session_id = p.session_id AND e.seq >= p.seq
WHERE e.tenant_id = $1 AND e.type = ANY($4) ORDER BY e.session_id, e.seq`, tenantID, ids, seqs, parkKinds)
	if err != nil {
		return translate(err, "session parks")
	}
	defer rows.Close()
	evs := map[uuid.UUID][]eventlog.Event{}
	for rows.Next() {
		var (
			id   uuid.UUID
			ev   eventlog.Event
			data []byte
		)
		if err := rows.Scan(&id, &ev.Seq, &ev.Type, &ev.Time, &data); err != nil {
			return translate(err, "session parks")
		}
		ev.Data = data
		evs[id] = append(evs[id], ev)
	}
	if err := rows.Err(); err != nil {
		return translate(err, "session parks")
	}
	for id, list := range evs {
		if p, ok := eventlog.Parked(list); ok {
			st := states[id]
			st.Park = &p
			states[id] = st
		}
	}
	return nil
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
