package pgstore

import (
	"context"
	"math"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/dshd/dshd/pkg/eventlog"
)

// syncInbox recomputes the inbox lengths of a session from its splice events after its last
// `session/end-seed` (after a seed or a fork copied events in without going through an append).
// A fork's inbox starts empty: LOOP-1 rebuilds it from the splices after the seed, so the parent's
// waiting messages are not served again in the child.
func syncInbox(ctx context.Context, q querier, sessionID uuid.UUID) error {
	rows, err := q.Query(ctx, `SELECT seq, data FROM events WHERE session_id = $1 AND type = $2
		AND seq > COALESCE((SELECT max(seq) FROM events WHERE session_id = $1 AND type = $3), -1)
		ORDER BY seq`, sessionID, eventlog.TypeInboxSpliced, eventlog.TypeSessionEndSeed)
	if err != nil {
		return err
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (eventlog.Event, error) {
		ev := eventlog.Event{Type: eventlog.TypeInboxSpliced}
		var data string
		err := r.Scan(&ev.Seq, &data)
		ev.Data = []byte(data)
		return ev, err
	})
	if err != nil {
		return err
	}
	l, err := eventlog.InboxLens{}.After(evs)
	if err != nil {
		return err
	}
	turn, step := replaySizes(evs)
	_, err = q.Exec(ctx, `UPDATE session_counters SET inbox_next_turn = $2, inbox_next_step = $3,
		inbox_next_turn_sizes = $4, inbox_next_step_sizes = $5 WHERE session_id = $1`,
		sessionID, l.NextTurn, l.NextStep, turn, step)
	return err
}

// replaySizes replays valid splices over the sizes of the waiting messages (migration 00008):
// exactly, wherever a splice inserts or deletes.
func replaySizes(evs []eventlog.Event) (turn, step []int32) {
	turn, step = []int32{}, []int32{}
	for _, ev := range evs {
		s, ok := eventlog.SpliceSizeOf(ev)
		if !ok {
			continue
		}
		l := &turn
		if s.Target == eventlog.InboxNextStep {
			l = &step
		}
		start := min(max(s.Start, 0), len(*l))
		end := min(start+max(s.Removed, 0), len(*l))
		ins := make([]int32, len(s.Inserted))
		for i, n := range s.Inserted {
			ins[i] = int32(min(n, math.MaxInt32))
		}
		*l = slices.Concat((*l)[:start], ins, (*l)[end:])
	}
	return turn, step
}
