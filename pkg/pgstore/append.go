package pgstore

import (
	"context"
	"errors"
	"math"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/dshd/dshd/pkg/eventlog"
)

// appendSQL is the one append statement: it moves the counter by n and the inbox lengths, inserts
// the rows and notifies, at once; with $14 it also releases the run lease when no followup waits
// after the batch and no waking message was posted during the serve (run_wake, migration 00007:
// the holder's release then serves again), a turn runner's last append of a turn, instead of a
// statement of its own. In the same statement it adds the batch's bytes to the session's
// log_bytes ($19), its usage to the turns it touches ($20) and the webhook deliveries it causes to
// the outbox ($21) (derived.go, migration 00010). It does nothing (no row) when the session is not the tenant's
// live session, when the log does not end at the expected seq, when the fence owner does not hold
// the run lease, or when an inbox length would go negative.
const appendSQL = `
WITH c AS (
	UPDATE session_counters sc SET last_seq = sc.last_seq + $3,
		inbox_next_turn = sc.inbox_next_turn + $10, inbox_next_step = sc.inbox_next_step + $11,
		-- the sizes of the waiting messages (migration 00008): $15/$17 removed from the front of
		-- next-turn/next-step, $16/$18 the sizes of those inserted at the end (inboxSizes)
		inbox_next_turn_sizes = CASE WHEN $15 = 0 AND cardinality($16::int[]) = 0 THEN sc.inbox_next_turn_sizes
			ELSE (sc.inbox_next_turn_sizes || $16::int[])[$15 + 1:] END,
		inbox_next_step_sizes = CASE WHEN $17 = 0 AND cardinality($18::int[]) = 0 THEN sc.inbox_next_step_sizes
			ELSE (sc.inbox_next_step_sizes || $18::int[])[$17 + 1:] END,
		run_owner = CASE WHEN $14 AND sc.inbox_next_turn + $10 = 0 AND NOT sc.run_wake THEN NULL ELSE sc.run_owner END,
		run_lease_until = CASE WHEN $14 AND sc.inbox_next_turn + $10 = 0 AND NOT sc.run_wake THEN NULL ELSE sc.run_lease_until END,
		log_bytes = sc.log_bytes + $19
	FROM sessions s
	WHERE sc.session_id = $1 AND s.id = $1 AND s.tenant_id = $2 AND s.deleted_at IS NULL
	  AND sc.last_seq = $4
	  AND ($12::uuid IS NULL OR sc.run_owner = $12)
	  AND sc.inbox_next_turn + $10 >= 0 AND sc.inbox_next_step + $11 >= 0
	RETURNING sc.last_seq, sc.run_owner IS NULL AS released
), ins AS (
	INSERT INTO events (session_id, seq, tenant_id, type, time, data, surface_op, source_event_seqs, ignorable)
	SELECT $1, $4 + u.ord, $2, u.type, u.time, u.data::json, u.op::json, u.src::bigint[], u.ign
	FROM c, unnest($6::text[], $7::text[], $8::text[], $9::text[], $13::bool[], $5::bigint[])
		WITH ORDINALITY AS u(type, data, op, src, ign, time, ord)
), usage AS (
	-- the usage of the turns the batch touches, added to their rows (derived.go: usageRows)
	INSERT INTO usage_turns AS t (session_id, turn, tenant_id, day, started_at, ended_at, end_kind,
		input_tokens, output_tokens, cache_read_tokens, cache_miss_tokens, reasoning_tokens,
		model_calls, tool_calls, tool_errors, model_errors)
	SELECT $1, u.turn, $2, u.day, u.started_at, u.ended_at, u.end_kind,
		u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_miss_tokens, u.reasoning_tokens,
		u.model_calls, u.tool_calls, u.tool_errors, u.model_errors
	FROM c, json_to_recordset($20::json) AS u(turn int, day date, started_at timestamptz, ended_at timestamptz,
		end_kind text, input_tokens bigint, output_tokens bigint, cache_read_tokens bigint, cache_miss_tokens bigint,
		reasoning_tokens bigint, model_calls bigint, tool_calls bigint, tool_errors bigint, model_errors bigint)
	WHERE $20::json IS NOT NULL
	ON CONFLICT (session_id, turn) DO UPDATE SET
		started_at = coalesce(t.started_at, excluded.started_at), ended_at = coalesce(excluded.ended_at, t.ended_at),
		end_kind = coalesce(excluded.end_kind, t.end_kind),
		input_tokens = t.input_tokens + excluded.input_tokens, output_tokens = t.output_tokens + excluded.output_tokens,
		cache_read_tokens = t.cache_read_tokens + excluded.cache_read_tokens,
		cache_miss_tokens = t.cache_miss_tokens + excluded.cache_miss_tokens,
		reasoning_tokens = t.reasoning_tokens + excluded.reasoning_tokens,
		model_calls = t.model_calls + excluded.model_calls, tool_calls = t.tool_calls + excluded.tool_calls,
		tool_errors = t.tool_errors + excluded.tool_errors, model_errors = t.model_errors + excluded.model_errors
), hooks AS (
	-- the webhook deliveries the batch causes, one per subscribed endpoint (derived.go: hookRows);
	-- session.idle only when this append released the lease
	INSERT INTO webhook_deliveries (id, endpoint_id, tenant_id, event_id, event_type, payload)
	SELECT gen_random_uuid(), e.id, $2, h.id, h.type, h.payload
	FROM c, json_to_recordset($21::json) AS h(id text, type text, payload json)
		JOIN webhook_endpoints e ON e.tenant_id = $2 AND e.disabled_at IS NULL AND h.type = ANY (e.events)
	WHERE $21::json IS NOT NULL AND (h.type <> '` + WebhookSessionIdle + `' OR c.released)
	ON CONFLICT (endpoint_id, event_id) DO NOTHING
)
SELECT last_seq, released, pg_notify('` + NotifyChannel + `', $1::text || ':' || last_seq) FROM c`

// appendParams is one append: a batch validated and stamped for the head it was built on, the
// inbox lengths it moves, and the lease that fences it (Owner nil: unfenced).
type appendParams struct {
	Tenant, Session uuid.UUID
	Head            eventlog.Head // the head the batch was built and stamped for
	Batch           []eventlog.Event
	Inbox           eventlog.InboxLens // the inbox lengths after the batch
	Owner           *uuid.UUID
	// Release gives up Owner's lease in the same statement when no followup waits after the batch.
	Release bool
}

// UUIDs are passed to pgx as [16]byte, which it encodes in binary; a uuid.UUID is a
// driver.Valuer, which pgx formats as text and PostgreSQL parses back.

// jsonParam passes b as a json parameter: nil as SQL NULL.
func jsonParam(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// errNoRow is appendRows' "the statement matched nothing": the head moved, the lease is another's,
// or the session is gone. The caller tells which.
var errNoRow = errors.New("pgstore: the append matched no counter row")

// appendRows runs the append statement for p and reports whether it released the lease.
func appendRows(ctx context.Context, q querier, p appendParams) (released bool, err error) {
	c := toColumns(p.Batch)
	z := inboxSizes(p.Batch)
	var last int64
	var owner *[16]byte
	if p.Owner != nil {
		o := [16]byte(*p.Owner)
		owner = &o
	}
	err = q.QueryRow(ctx, appendSQL, [16]byte(p.Session), [16]byte(p.Tenant), len(p.Batch), p.Head.Last(), c.times,
		c.types, c.datas, c.ops, c.srcs, p.Inbox.NextTurn-p.Head.Inbox.NextTurn,
		p.Inbox.NextStep-p.Head.Inbox.NextStep, owner, c.ignorable, p.Release && p.Owner != nil,
		z.turn.removed, z.turn.inserted, z.step.removed, z.step.inserted, batchBytes(p.Batch),
		jsonParam(usageRows(p.Batch)), jsonParam(hookRows(p.Session, p.Batch, p.Release && p.Owner != nil))).
		Scan(&last, &released, nil)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, errNoRow
	}
	return released && p.Release && p.Owner != nil, translate(err, "append")
}

// listSizes is what a batch does to the sizes of one inbox list: how many messages it removes
// from the front, and the sizes of those it inserts at the end, in order.
type listSizes struct {
	removed  int
	inserted []int32
}

// batchSizes is what a batch does to the sizes of both lists.
type batchSizes struct{ turn, step listSizes }

// inboxSizes reads the splices of a validated batch. A message's size is the length of its JSON
// in the splice. Splices are taken to insert at the end and delete from the front, as every
// writer's do (eventlog.Insertion, eventlog.Deletion); another keeps the count right and makes the
// sizes approximate.
func inboxSizes(batch []eventlog.Event) batchSizes {
	z := batchSizes{turn: listSizes{inserted: []int32{}}, step: listSizes{inserted: []int32{}}}
	for _, ev := range batch {
		s, ok := eventlog.SpliceSizeOf(ev)
		if !ok {
			continue // not a splice; prepare validated the splices
		}
		l := &z.turn
		if s.Target == eventlog.InboxNextStep {
			l = &z.step
		}
		l.removed += s.Removed
		for _, n := range s.Inserted {
			l.inserted = append(l.inserted, int32(min(n, math.MaxInt32)))
		}
	}
	return z
}

// insertSQL inserts rows with explicit seqs and times (seeds and forks); the caller holds the
// counter and moves it; the stored bytes ($10) are added to the counter's log_bytes.
const insertSQL = `
WITH ins AS (
	INSERT INTO events (session_id, seq, tenant_id, type, time, data, surface_op, source_event_seqs, ignorable)
	SELECT $1, u.seq, $2, u.type, u.time, u.data::json, u.op::json, u.src::bigint[], u.ign
	FROM unnest($3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::text[], $9::bool[])
		AS u(seq, time, type, data, op, src, ign)
)
UPDATE session_counters SET log_bytes = log_bytes + $10 WHERE session_id = $1`

// columns are the per-row arrays of a batch.
type columns struct {
	seqs, times  []int64
	types, datas []string
	ops, srcs    []*string
	ignorable    []bool
}

func toColumns(evs []eventlog.Event) columns {
	n := len(evs)
	c := columns{seqs: make([]int64, n), times: make([]int64, n), types: make([]string, n),
		datas: make([]string, n), ops: make([]*string, n), srcs: make([]*string, n), ignorable: make([]bool, n)}
	for i, ev := range evs {
		c.seqs[i], c.times[i], c.types[i], c.datas[i], c.ignorable[i] = ev.Seq, ev.Time, ev.Type, string(ev.Data), ev.Ignorable
		if ev.SurfaceOp != nil {
			b, _ := ev.SurfaceOp.MarshalJSON()
			s := string(b)
			c.ops[i] = &s
		}
		if ev.SourceEventSeqs != nil {
			s := pgArray(ev.SourceEventSeqs)
			c.srcs[i] = &s
		}
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
func insertEvents(ctx context.Context, q querier, tenantID, sessionID uuid.UUID, evs []eventlog.Event) error {
	if len(evs) == 0 {
		return nil
	}
	c := toColumns(evs)
	_, err := q.Exec(ctx, insertSQL, sessionID, tenantID, c.seqs, c.times, c.types, c.datas, c.ops, c.srcs, c.ignorable,
		batchBytes(evs))
	return err
}

// lastSeq reads the session's counter. ErrNotFound unless the session is the tenant's and live.
func lastSeq(ctx context.Context, q querier, tenantID, sessionID uuid.UUID) (int64, error) {
	var last int64
	err := q.QueryRow(ctx, `SELECT c.last_seq FROM session_counters c JOIN sessions s ON s.id = c.session_id
		WHERE c.session_id = $1 AND s.tenant_id = $2 AND s.deleted_at IS NULL`, sessionID, tenantID).Scan(&last)
	return last, translate(err, "read counter")
}

// prepare validates what build returned for head h against the log-independent rules, stamps it
// and checks the rules that need the log: sources are earlier (SES-3), the surface for a
// replacement (SES-3, SES-4, read from q), the optional SES-10 checker, and the inbox fit
// (LOOP-1). It returns the stamped batch and the inbox lengths after it.
func (s *Store) prepare(ctx context.Context, q querier, sessionID uuid.UUID, h eventlog.Head, evs []eventlog.NewEvent) ([]eventlog.Event, eventlog.InboxLens, error) {
	batch, err := eventlog.Prepare(evs)
	if err != nil {
		return nil, h.Inbox, err
	}
	eventlog.Stamp(batch, h.Next, s.now().UnixMilli())
	lens, err := h.Inbox.After(batch)
	if err != nil {
		return nil, h.Inbox, err
	}
	if s.check {
		prior, err := loadEvents(ctx, q, sessionID, -1, nil, 0)
		if err != nil {
			return nil, h.Inbox, err
		}
		if err := eventlog.CheckInvariants(append(prior, batch...)); err != nil {
			return nil, h.Inbox, err
		}
	}
	var sf *eventlog.SurfaceState
	if eventlog.HasReplace(batch) {
		if sf, err = loadSurface(ctx, q, sessionID); err != nil {
			return nil, h.Inbox, err
		}
	}
	lookup := func(seq int64) (eventlog.Event, error) {
		if seq >= h.Next {
			return batch[seq-h.Next], nil
		}
		return loadEvent(ctx, q, sessionID, seq)
	}
	if err := eventlog.CheckBatch(batch, sf, lookup); err != nil {
		return nil, h.Inbox, err
	}
	return batch, lens, nil
}

// AppendTx appends to the session inside the caller's transaction tx, unfenced: it locks the
// session's counter row, calls build with the head and appends what build returns (posting a
// message appends to the inbox and enqueues its job in one transaction). The events become
// visible, and followers are woken, when tx commits. A build or validation error leaves tx usable
// and unchanged; a database error leaves it for the caller to roll back.
func (s *Store) AppendTx(ctx context.Context, tx pgx.Tx, tenantID, sessionID uuid.UUID, build eventlog.BuildFunc) ([]eventlog.Event, error) {
	h, err := s.head(ctx, tx, tenantID, sessionID, true)
	if err != nil {
		return nil, err
	}
	return s.appendAt(ctx, tx, tenantID, sessionID, h, nil, build)
}

// appendAt builds, checks and appends a batch at head h (which q holds locked, or which the
// statement's conditions prove current). errNoRow when the statement matched nothing.
func (s *Store) appendAt(ctx context.Context, q querier, tenantID, sessionID uuid.UUID, h eventlog.Head, owner *uuid.UUID, build eventlog.BuildFunc) ([]eventlog.Event, error) {
	p, err := s.buildAt(ctx, q, tenantID, sessionID, h, owner, build)
	if err != nil || len(p.Batch) == 0 {
		return nil, err
	}
	if _, err = appendRows(ctx, q, p); err != nil {
		return nil, err
	}
	return p.Batch, nil
}

// buildAt builds and checks a batch at head h: the append to run (no batch when build returned
// no events).
func (s *Store) buildAt(ctx context.Context, q querier, tenantID, sessionID uuid.UUID, h eventlog.Head, owner *uuid.UUID, build eventlog.BuildFunc) (appendParams, error) {
	evs, err := build(h)
	if err != nil || len(evs) == 0 {
		return appendParams{}, err
	}
	batch, lens, err := s.prepare(ctx, q, sessionID, h, evs)
	if err != nil {
		return appendParams{}, err
	}
	return appendParams{Tenant: tenantID, Session: sessionID, Head: h, Batch: batch, Inbox: lens, Owner: owner}, nil
}

// appendOutcomeSQL reads the event at a seq (none: nulls) and the session's run lease owner.
const appendOutcomeSQL = `
SELECT e.type, e.time, e.data::text, c.run_owner
FROM session_counters c LEFT JOIN events e ON e.session_id = c.session_id AND e.seq = $2
WHERE c.session_id = $1`

// appendOutcome tells whether the append p committed, when its statement failed without saying
// (the connection was lost before the reply): it did exactly when the log holds the batch's first
// event at the seq it was stamped for, with the same type, time and data (a batch commits whole or
// not at all, and its first event is its own: another writer's event at that seq has another
// time or data). owner is the session's run lease owner now (nil: free), for a batch that
// released it.
func appendOutcome(ctx context.Context, q querier, p appendParams) (committed bool, owner *uuid.UUID, err error) {
	first := p.Batch[0]
	var (
		typ, data *string
		at        *int64
	)
	err = q.QueryRow(ctx, appendOutcomeSQL, p.Session, first.Seq).Scan(&typ, &at, &data, &owner)
	if err != nil {
		return false, nil, translate(err, "read back an append")
	}
	committed = typ != nil && *typ == first.Type && *at == first.Time && *data == string(first.Data)
	return committed, owner, nil
}
