package pgstore

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
)

// Usage groupings (UsageQuery.GroupBy).
const (
	UsageByDay     = "day"
	UsageBySession = "session"
	UsageByTurn    = "turn"
	UsageByPreset  = "preset"
	UsageTotal     = "none"
)

// UsageGroupings are the groupings GET /v1/usage accepts.
var UsageGroupings = []string{UsageByDay, UsageBySession, UsageByTurn, UsageByPreset, UsageTotal}

// MaxUsageLimit bounds the rows of one page of usage.
const MaxUsageLimit = 1000

// UsageQuery asks for a tenant's usage (the usage_turns rows the append statement keeps, migration
// 00010) of the turns that started in [From, To), grouped. Sessions, turns and presets are paged
// by Cursor (a page's Next) and Limit; days and the total are one page.
type UsageQuery struct {
	Tenant   uuid.UUID
	From, To time.Time
	GroupBy  string
	Cursor   string
	Limit    int
}

// UsageRow is the usage of one group: its key (the day, the session, the session's turn, or the
// preset; none for the total), the turns in it and their run time (the sum over its ended turns
// of turn/end's time less turn/start's), and the usage fold of their events (eventlog.Usage).
type UsageRow struct {
	Day       string     // UsageByDay: YYYY-MM-DD (UTC)
	SessionID *uuid.UUID // UsageBySession, UsageByTurn
	Turn      *int       // UsageByTurn
	PresetID  *uuid.UUID // UsageByPreset (nil: sessions without a preset)
	// UsageByTurn: the turn's start and end and its end reason kind (nil while open).
	StartedAt, EndedAt *time.Time
	EndKind            *string
	Turns              int64
	RunTimeMs          int64
	Usage              eventlog.Usage

	at int64 // UsageByTurn: the row's start in µs, its cursor's first key
}

// UsagePage is one page of usage rows; Next is the cursor of the next page ("" at the end).
type UsagePage struct {
	Rows []UsageRow
	Next string
}

// usageSums are the aggregate columns of every grouping, in UsageRow's scan order.
const usageSums = `count(*)::bigint,
	coalesce(sum((extract(epoch FROM u.ended_at - u.started_at) * 1000)::bigint), 0)::bigint,
	coalesce(sum(u.input_tokens), 0)::bigint, coalesce(sum(u.output_tokens), 0)::bigint,
	coalesce(sum(u.cache_read_tokens), 0)::bigint, coalesce(sum(u.cache_miss_tokens), 0)::bigint,
	coalesce(sum(u.reasoning_tokens), 0)::bigint, coalesce(sum(u.model_calls), 0)::bigint,
	coalesce(sum(u.tool_calls), 0)::bigint, coalesce(sum(u.tool_errors), 0)::bigint,
	coalesce(sum(u.model_errors), 0)::bigint`

// usageStart is the time a usage row counts at: its turn's start (a row always has one unless
// its turn/start was never appended, then its UTC day's start). It is the expression of the
// usage_turns_tenant_start index (migration 00015), which pages of turns seek by.
const usageStart = `coalesce(u.started_at, u.day::timestamp AT TIME ZONE 'UTC')`

// usageColumns are usageSums for one row: a page of turns reads rows, one per turn, in index
// order, without an aggregate.
const usageColumns = `1::bigint,
	coalesce((extract(epoch FROM u.ended_at - u.started_at) * 1000)::bigint, 0)::bigint,
	u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_miss_tokens, u.reasoning_tokens,
	u.model_calls, u.tool_calls, u.tool_errors, u.model_errors`

// usageRange selects the tenant's rows whose turn started in [$2, $3): the day bounds ($4, $5,
// the UTC days of from and to) let the (tenant_id, day) index find them, when no page's index
// (migration 00015) serves better.
const usageRange = `u.tenant_id = $1 AND u.day >= $4::date AND u.day <= $5::date
	AND ` + usageStart + ` >= $2 AND ` + usageStart + ` < $3`

// Usage reads a page of the tenant's usage. An invalid cursor is an invalid_request fault.
func (s *Store) Usage(ctx context.Context, q UsageQuery) (UsagePage, error) {
	if q.Limit <= 0 || q.Limit > MaxUsageLimit {
		q.Limit = MaxUsageLimit
	}
	args := []any{q.Tenant, q.From, q.To, q.From.UTC().Format(time.DateOnly), q.To.UTC().Format(time.DateOnly)}
	var (
		sql  string
		scan func(pgx.Rows, *UsageRow) error
		key  func(UsageRow) []any // the cursor of the page after a row
	)
	var cur []json.RawMessage
	if q.Cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(q.Cursor)
		if err != nil || json.Unmarshal(b, &cur) != nil || len(cur) == 0 {
			return UsagePage{}, fault.New(fault.Invalid, "cursor is not a cursor of this listing")
		}
	}
	sums := func(r pgx.Rows, row *UsageRow, keys ...any) error {
		u := &row.Usage
		return r.Scan(append(keys, &row.Turns, &row.RunTimeMs, &u.InputTokens, &u.OutputTokens, &u.CacheReadTokens,
			&u.CacheMissTokens, &u.ReasoningTokens, &u.ModelCalls, &u.ToolCalls, &u.ToolErrors, &u.ModelErrors)...)
	}
	paged := false
	switch q.GroupBy {
	case UsageByDay, "":
		sql = `SELECT u.day::text, ` + usageSums + ` FROM usage_turns u WHERE ` + usageRange + ` GROUP BY u.day ORDER BY u.day`
		scan = func(r pgx.Rows, row *UsageRow) error { return sums(r, row, &row.Day) }
	case UsageTotal:
		sql = `SELECT ` + usageSums + ` FROM usage_turns u WHERE ` + usageRange
		scan = func(r pgx.Rows, row *UsageRow) error { return sums(r, row) }
	case UsageBySession:
		paged = true
		after := uuid.Nil
		if cur != nil && (len(cur) != 1 || json.Unmarshal(cur[0], &after) != nil) {
			return UsagePage{}, fault.New(fault.Invalid, "cursor is not a cursor of this listing")
		}
		args = append(args, after, q.Limit+1)
		sql = `SELECT u.session_id, ` + usageSums + ` FROM usage_turns u WHERE ` + usageRange + ` AND u.session_id > $6
			GROUP BY u.session_id ORDER BY u.session_id LIMIT $7`
		scan = func(r pgx.Rows, row *UsageRow) error { return sums(r, row, &row.SessionID) }
		key = func(row UsageRow) []any { return []any{row.SessionID} }
	case UsageByPreset:
		paged = true
		after := ""
		if cur != nil && (len(cur) != 1 || json.Unmarshal(cur[0], &after) != nil) {
			return UsagePage{}, fault.New(fault.Invalid, "cursor is not a cursor of this listing")
		}
		// Sessions without a preset group under the empty key, first.
		args = append(args, after, q.Limit+1, cur != nil)
		sql = `SELECT k.preset_id, ` + strings.ReplaceAll(usageSums, "u.", "k.") + `
			FROM (SELECT coalesce(s.preset_id::text, '') AS key, s.preset_id, u.*
				FROM usage_turns u JOIN sessions s ON s.id = u.session_id WHERE ` + usageRange + `) k
			WHERE NOT $8 OR k.key > $6
			GROUP BY k.key, k.preset_id ORDER BY k.key LIMIT $7`
		scan = func(r pgx.Rows, row *UsageRow) error { return sums(r, row, &row.PresetID) }
		key = func(row UsageRow) []any {
			if row.PresetID == nil {
				return []any{""}
			}
			return []any{row.PresetID.String()}
		}
	case UsageByTurn:
		paged = true
		var (
			at   int64 = -62135596800_000000 // 0001-01-01
			sess       = uuid.Nil
			turn int   = -1
		)
		if cur != nil && (len(cur) != 3 || json.Unmarshal(cur[0], &at) != nil || json.Unmarshal(cur[1], &sess) != nil ||
			json.Unmarshal(cur[2], &turn) != nil) {
			return UsagePage{}, fault.New(fault.Invalid, "cursor is not a cursor of this listing")
		}
		args = append(args, at, sess, turn, q.Limit+1)
		// (session, turn) is the key of usage_turns: a turn is one row. The cursor's start is in
		// µs, compared as a time so that the index on usageStart seeks to it.
		sql = `SELECT (extract(epoch FROM ` + usageStart + `) * 1000000)::bigint, u.session_id, u.turn,
			u.started_at, u.ended_at, u.end_kind, ` + usageColumns + `
			FROM usage_turns u WHERE ` + usageRange + `
			AND (` + usageStart + `, u.session_id, u.turn) > ('epoch'::timestamptz + $6::bigint * interval '1 microsecond', $7::uuid, $8::int)
			ORDER BY ` + usageStart + `, u.session_id, u.turn LIMIT $9`
		scan = func(r pgx.Rows, row *UsageRow) error {
			row.Turn = new(int)
			return sums(r, row, &row.at, &row.SessionID, row.Turn, &row.StartedAt, &row.EndedAt, &row.EndKind)
		}
		key = func(row UsageRow) []any { return []any{row.at, row.SessionID, *row.Turn} }
	default:
		return UsagePage{}, fault.New(fault.Invalid, "groupBy must be one of %s", strings.Join(UsageGroupings, ", "))
	}
	// A page is planned for its own range and cursor each time (the unnamed statement): a generic
	// plan, which a cached prepared statement gets after five runs, cannot tell a narrow range
	// from the whole history, and for sessions it picks the start index and sorts every row.
	rows, err := s.pool.Query(ctx, sql, append([]any{pgx.QueryExecModeCacheDescribe}, args...)...)
	if err != nil {
		return UsagePage{}, translate(err, "read usage")
	}
	var page UsagePage
	for rows.Next() {
		var row UsageRow
		if err := scan(rows, &row); err != nil {
			rows.Close()
			return UsagePage{}, translate(err, "read usage")
		}
		page.Rows = append(page.Rows, row)
	}
	if err := rows.Err(); err != nil {
		return UsagePage{}, translate(err, "read usage")
	}
	if paged && len(page.Rows) > q.Limit {
		page.Rows = page.Rows[:q.Limit]
		b, err := json.Marshal(key(page.Rows[q.Limit-1]))
		if err != nil {
			return UsagePage{}, fmt.Errorf("usage cursor: %w", err)
		}
		page.Next = base64.RawURLEncoding.EncodeToString(b)
	}
	return page, nil
}
