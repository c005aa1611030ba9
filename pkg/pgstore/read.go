package pgstore

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
)

// ListQuery selects a page of events: those with seq > After (-1 for the whole log), of the given
// types (all when empty), at most Limit (default 100, at most 1000), in seq order. MaxBytes, when
// positive, also ends the page with the event at which its data reaches MaxBytes, so that a page
// of large events does not cost Limit times their size: a page shorter than Limit whose data is
// under MaxBytes holds every matching event there is.
type ListQuery struct {
	After    int64
	Limit    int
	Types    []string
	MaxBytes int
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
	const page = `SELECT ` + eventColumns + ` FROM events
		WHERE session_id = $1 AND tenant_id = $2 AND seq > $3 AND ($5::text[] IS NULL OR type = ANY($5))
		  AND EXISTS (SELECT 1 FROM sessions WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL)
		ORDER BY seq LIMIT $4`
	var (
		rows pgx.Rows
		err  error
	)
	if q.MaxBytes > 0 {
		// The rows of the page that start before its data reaches the budget.
		rows, err = s.pool.Query(ctx, `SELECT `+eventColumns+` FROM (
			SELECT *, sum(octet_length(data::text)) OVER (ORDER BY seq) - octet_length(data::text) AS before
			FROM (`+page+`) p) w
			WHERE before < $6
			ORDER BY seq`, sessionID, tenantID, q.After, q.Limit, types, q.MaxBytes)
	} else {
		rows, err = s.pool.Query(ctx, page, sessionID, tenantID, q.After, q.Limit, types)
	}
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
	return foldSurface(ctx, q, sessionID, math.MaxInt64)
}

// foldSurface folds the surface markers of the session's events up to seq upTo.
func foldSurface(ctx context.Context, q querier, sessionID uuid.UUID, upTo int64) (*eventlog.SurfaceState, error) {
	rows, err := q.Query(ctx, `SELECT seq, surface_op FROM events
		WHERE session_id = $1 AND seq <= $2 AND `+surfaceFilter+` ORDER BY seq`, sessionID, upTo)
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

// HistoryQuery selects a page of a session's model-visible history: the messages after Cursor
// ("" for the first page, then the previous page's next cursor), at most Limit of them (default
// DefaultHistoryPage, at most MaxHistoryPage), whose event data adds up to at most MaxBytes
// (default DefaultHistoryBytes); a page holds at least one message.
type HistoryQuery struct {
	Cursor   string
	Limit    int
	MaxBytes int
}

// Default and maximum sizes of a history page.
const (
	DefaultHistoryPage  = 500
	MaxHistoryPage      = 1000
	DefaultHistoryBytes = 4 << 20
)

// ErrInvalidHistoryCursor reports a history cursor this store did not produce for the session.
var ErrInvalidHistoryCursor = fault.New(fault.Invalid, "invalid cursor")

// HistoryPage returns a page of the session's model-visible history (SES-5) and the cursor of
// the next page ("" after the last). Every page of one walk is cut from the history as it was at
// the first page (the cursor pins the log's last seq then), so a walk sees one consistent history
// even while the session runs or compacts. Only the page's events are read, so a page costs its
// own size, whatever the size of the session. ErrNotFound as SessionGet; a cursor that is not one
// of this session's is ErrInvalidHistoryCursor.
func (s *Store) HistoryPage(ctx context.Context, tenantID, sessionID uuid.UUID, q HistoryQuery) ([]llm.Message, string, error) {
	if q.Limit <= 0 {
		q.Limit = DefaultHistoryPage
	}
	q.Limit = min(q.Limit, MaxHistoryPage)
	if q.MaxBytes <= 0 {
		q.MaxBytes = DefaultHistoryBytes
	}
	var (
		out  []llm.Message
		next string
	)
	err := s.inReadTx(ctx, "read history", func(tx pgx.Tx) error {
		last, err := lastSeq(ctx, tx, tenantID, sessionID)
		if err != nil {
			return err
		}
		upTo, after := last, int64(-1)
		if q.Cursor != "" {
			var ok bool
			if upTo, after, ok = decodeHistoryCursor(q.Cursor); !ok || upTo > last || after > upTo {
				return ErrInvalidHistoryCursor
			}
		}
		nodes, err := surfaceNodes(ctx, tx, sessionID, upTo)
		if err != nil {
			return err
		}
		from := 0
		if after >= 0 {
			i := slices.Index(nodes, after)
			if i < 0 {
				return ErrInvalidHistoryCursor
			}
			from = i + 1
		}
		page := nodes[from:min(len(nodes), from+q.Limit)]
		if page, err = underBytes(ctx, tx, sessionID, page, q.MaxBytes); err != nil {
			return err
		}
		if len(page) == 0 {
			return nil
		}
		evs, err := loadSeqs(ctx, tx, sessionID, page)
		if err != nil {
			return err
		}
		bySeq := make(map[int64]eventlog.Event, len(evs))
		for _, ev := range evs {
			bySeq[ev.Seq] = ev
		}
		if out, err = eventlog.DeriveNodes(page, func(seq int64) eventlog.Event { return bySeq[seq] }); err != nil {
			return err
		}
		if end := from + len(page); end < len(nodes) {
			next = encodeHistoryCursor(upTo, nodes[end-1])
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return out, next, nil
}

// surfaceNodes folds the surface markers of the events up to seq upTo into the surface nodes.
func surfaceNodes(ctx context.Context, q querier, sessionID uuid.UUID, upTo int64) ([]int64, error) {
	sf, err := foldSurface(ctx, q, sessionID, upTo)
	if err != nil {
		return nil, err
	}
	return sf.Nodes(), nil
}

// underBytes returns the longest prefix of seqs whose event data adds up to at most budget bytes,
// and at least one seq. It reads the sizes only.
func underBytes(ctx context.Context, q querier, sessionID uuid.UUID, seqs []int64, budget int) ([]int64, error) {
	if len(seqs) == 0 {
		return seqs, nil
	}
	rows, err := q.Query(ctx, `SELECT seq, octet_length(data::text) FROM events
		WHERE session_id = $1 AND seq = ANY($2)`, sessionID, seqs)
	if err != nil {
		return nil, translate(err, "read history sizes")
	}
	size := make(map[int64]int64, len(seqs))
	var seq, n int64
	if _, err := pgx.ForEachRow(rows, []any{&seq, &n}, func() error { size[seq] = n; return nil }); err != nil {
		return nil, translate(err, "read history sizes")
	}
	total := int64(0)
	for i, seq := range seqs {
		if total += size[seq]; total > int64(budget) && i > 0 {
			return seqs[:i], nil
		}
	}
	return seqs, nil
}

// loadSeqs reads the events of a session with the given seqs.
func loadSeqs(ctx context.Context, q querier, sessionID uuid.UUID, seqs []int64) ([]eventlog.Event, error) {
	rows, err := q.Query(ctx, `SELECT `+eventColumns+` FROM events
		WHERE session_id = $1 AND seq = ANY($2) ORDER BY seq`, sessionID, seqs)
	if err != nil {
		return nil, translate(err, "read events")
	}
	return collectEvents(rows)
}

// A history cursor is base64url("h<upTo>.<after>"): the log's last seq when the walk began and
// the surface node that ended the previous page.
func encodeHistoryCursor(upTo, after int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("h" + strconv.FormatInt(upTo, 10) + "." + strconv.FormatInt(after, 10)))
}

func decodeHistoryCursor(c string) (upTo, after int64, ok bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) < 2 || b[0] != 'h' {
		return 0, 0, false
	}
	u, a, found := strings.Cut(string(b[1:]), ".")
	upTo, err1 := strconv.ParseInt(u, 10, 64)
	after, err2 := strconv.ParseInt(a, 10, 64)
	if !found || err1 != nil || err2 != nil || after < 0 || encodeHistoryCursor(upTo, after) != c {
		return 0, 0, false
	}
	return upTo, after, true
}

// inReadTx runs fn in a repeatable-read, read-only transaction, so every query sees one snapshot.
func (s *Store) inReadTx(ctx context.Context, what string, fn func(tx pgx.Tx) error) error {
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
	return translate(err, what)
}

// LastOfType returns the session's last event of type typ, and false when it has none. It
// returns ErrNotFound for an unknown, another tenant's or a deleted session.
func (s *Store) LastOfType(ctx context.Context, tenantID, sessionID uuid.UUID, typ string) (eventlog.Event, bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+eventColumns+` FROM events
		WHERE session_id = $1 AND tenant_id = $2 AND type = $3
		  AND EXISTS (SELECT 1 FROM sessions WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL)
		ORDER BY seq DESC LIMIT 1`, sessionID, tenantID, typ)
	if err != nil {
		return eventlog.Event{}, false, translate(err, "read last event")
	}
	evs, err := collectEvents(rows)
	if err != nil || len(evs) == 0 {
		return eventlog.Event{}, false, translate(err, "read last event")
	}
	return evs[0], true, nil
}
