package pgstore

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

// ListQuery selects a page of events: those with seq > After (-1 for the whole log), of the given
// types (all when empty), at most Limit (default 100, at most 1000), in seq order.
type ListQuery struct {
	After int64
	Limit int
	Types []string
}

// Default and maximum page sizes of EventList.
const (
	DefaultEventPage = 100
	MaxEventPage     = 1000
)

const eventColumns = `seq, type, time, data, surface_op, source_event_seqs, ignorable`

// surfaceFilter selects the surface events, spelled as literals so that the partial index of
// migration 00002 applies.
const surfaceFilter = `type IN ('user/message', 'assistant/message', 'tool/result')`

// EventList returns a page of the session's events. It returns ErrNotFound for an unknown,
// another tenant's or a deleted session; an empty page means there is nothing after q.After yet.
// Because the counter row lock makes commit order equal seq order, a reader that pages with the
// last seq it saw never skips an event committed later.
func (s *Store) EventList(ctx context.Context, tenantID, sessionID uuid.UUID, q ListQuery) ([]eventlog.Event, error) {
	if q.Limit <= 0 {
		q.Limit = DefaultEventPage
	}
	q.Limit = min(q.Limit, MaxEventPage)
	var types []string
	if len(q.Types) > 0 {
		types = q.Types
	}
	rows, err := s.pool.Query(ctx, `SELECT `+eventColumns+` FROM events
		WHERE session_id = $1 AND tenant_id = $2 AND seq > $3 AND ($5::text[] IS NULL OR type = ANY($5))
		  AND EXISTS (SELECT 1 FROM sessions WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL)
		ORDER BY seq LIMIT $4`, sessionID, tenantID, q.After, q.Limit, types)
	if err != nil {
		return nil, translate(err, "list events")
	}
	evs, err := collectEvents(rows)
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		if _, err := lastSeq(ctx, s.pool, tenantID, sessionID); err != nil {
			return nil, err
		}
	}
	return evs, nil
}

func collectEvents(rows pgx.Rows) ([]eventlog.Event, error) {
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (eventlog.Event, error) {
		var ev eventlog.Event
		var data, op []byte
		var srcValid pgtype.Array[int64]
		// Scanning the json columns into plain bytes copies them; a json.RawMessage target would
		// make pgx run encoding/json over data that was validated when it was appended.
		if err := r.Scan(&ev.Seq, &ev.Type, &ev.Time, &data, &op, &srcValid, &ev.Ignorable); err != nil {
			return ev, err
		}
		ev.Data = data
		switch {
		case op == nil:
		case string(op) == `"append"`:
			ev.SurfaceOp = eventlog.Append
		default:
			ev.SurfaceOp = new(eventlog.SurfaceOp)
			if err := json.Unmarshal(op, ev.SurfaceOp); err != nil {
				return ev, err
			}
		}
		if srcValid.Valid {
			ev.SourceEventSeqs = srcValid.Elements
			if ev.SourceEventSeqs == nil {
				ev.SourceEventSeqs = []int64{}
			}
		}
		return ev, nil
	})
	return evs, translate(err, "read events")
}

// loadEvents reads events of a session with seq > after (types all when nil, at most limit when
// limit > 0). The caller has checked the tenant.
func loadEvents(ctx context.Context, q querier, sessionID uuid.UUID, after int64, types []string, limit int) ([]eventlog.Event, error) {
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	rows, err := q.Query(ctx, `SELECT `+eventColumns+` FROM events
		WHERE session_id = $1 AND seq > $2 AND ($3::text[] IS NULL OR type = ANY($3))
		ORDER BY seq LIMIT $4`, sessionID, after, types, lim)
	if err != nil {
		return nil, translate(err, "read events")
	}
	return collectEvents(rows)
}

func loadEvent(ctx context.Context, q querier, sessionID uuid.UUID, seq int64) (eventlog.Event, error) {
	rows, err := q.Query(ctx, `SELECT `+eventColumns+` FROM events WHERE session_id = $1 AND seq = $2`, sessionID, seq)
	if err != nil {
		return eventlog.Event{}, translate(err, "read event")
	}
	evs, err := collectEvents(rows)
	if err != nil {
		return eventlog.Event{}, err
	}
	if len(evs) == 0 {
		return eventlog.Event{}, ErrNotFound
	}
	return evs[0], nil
}

// loadSurface folds the session's committed surface markers (trusted: they were validated when
// appended) into the current surface.
func loadSurface(ctx context.Context, q querier, sessionID uuid.UUID) (*eventlog.SurfaceState, error) {
	rows, err := q.Query(ctx, `SELECT seq, surface_op FROM events
		WHERE session_id = $1 AND `+surfaceFilter+` ORDER BY seq`, sessionID)
	if err != nil {
		return nil, translate(err, "read surface")
	}
	sf := &eventlog.SurfaceState{}
	var seq int64
	var op []byte
	_, err = pgx.ForEachRow(rows, []any{&seq, &op}, func() error {
		var o eventlog.SurfaceOp
		if op != nil {
			if err := json.Unmarshal(op, &o); err != nil {
				return err
			}
		}
		sf.Fold(seq, o)
		return nil
	})
	return sf, translate(err, "read surface")
}

// DeriveMessages returns the session's model-visible history (SES-5): the surface events folded
// with their replacements, mapped to messages. ErrNotFound as SessionGet.
func (s *Store) DeriveMessages(ctx context.Context, tenantID, sessionID uuid.UUID) ([]llm.Message, error) {
	var out []llm.Message
	err := s.inReadTx(ctx, "derive messages", func(tx pgx.Tx) error {
		if _, err := lastSeq(ctx, tx, tenantID, sessionID); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+eventColumns+` FROM events
			WHERE session_id = $1 AND `+surfaceFilter+` ORDER BY seq`, sessionID)
		if err != nil {
			return err
		}
		evs, err := collectEvents(rows)
		if err != nil {
			return err
		}
		bySeq := make(map[int64]eventlog.Event, len(evs))
		var sf eventlog.SurfaceState
		for _, ev := range evs {
			bySeq[ev.Seq] = ev
			if ev.SurfaceOp != nil {
				sf.Fold(ev.Seq, *ev.SurfaceOp)
			}
		}
		out, err = eventlog.DeriveNodes(sf.Nodes(), func(seq int64) eventlog.Event { return bySeq[seq] })
		return err
	})
	return out, err
}

// inReadTx runs fn in a repeatable-read, read-only transaction, so every query sees one snapshot.
func (s *Store) inReadTx(ctx context.Context, what string, fn func(tx pgx.Tx) error) error {
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
	return translate(err, what)
}
