package pgstore

import (
	"context"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
)

// EventReader reads one session's events inside a transaction of the store (PostParams.Prepare).
// The tenant has been checked.
type EventReader interface {
	// Since returns the events with seq > after, of the given types (all when nil), in order, at
	// most limit of them (limit > 0).
	Since(ctx context.Context, after int64, types []string, limit int) ([]eventlog.Event, error)
	// Last returns the session's last event of type typ; ok is false when it has none.
	Last(ctx context.Context, typ string) (ev eventlog.Event, ok bool, err error)
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
