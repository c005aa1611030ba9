package pgstore

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// SessionParams describes a session to create. Everything is optional.
type SessionParams struct {
	ID              uuid.UUID  // zero: a new random id
	PresetID        *uuid.UUID // the preset the session runs
	PresetVersion   int        // the preset version it pins
	Cwd             string     // absolute working directory (SES-16)
	Owner           string     // partition key; default the tenant id
	ParentSession   string     // the session this one descends from (subagents)
	Origin          string     // "subagent" or empty
	DelegationDepth int
	AgentPreset     string
	// Seed is a log to start from (SES-12): seqs contiguous from 0, each event validated like an
	// append. A session/end-seed marker is appended unless the seed ends with one, and the
	// header's seedLength is len(Seed).
	Seed []eventlog.Event
}

const sessionColumns = `s.id, s.tenant_id, s.preset_id, s.preset_version, s.header, s.created_at, c.last_seq`

// SessionCreate creates a session of tenantID. It returns ErrConflict when p.ID is taken,
// ErrNotFound when the tenant does not exist, and a *ValidationError for a bad seed.
func (s *Store) SessionCreate(ctx context.Context, tenantID uuid.UUID, p SessionParams) (eventlog.Session, error) {
	if p.ID == uuid.Nil {
		p.ID = uuid.New()
	}
	created := s.now().Truncate(time.Millisecond)
	h := eventlog.SessionHeader{Version: eventlog.FormatVersion, ID: p.ID.String(), CreatedAt: created.UnixMilli(), Cwd: p.Cwd,
		ParentSession: p.ParentSession, Origin: p.Origin, DelegationDepth: p.DelegationDepth,
		AgentPreset: p.AgentPreset, Owner: p.Owner}
	if h.Owner == "" {
		h.Owner = tenantID.String()
	}
	var seed []eventlog.Event
	if p.Seed != nil {
		l, err := eventlog.LoadLog(p.Seed)
		if err != nil {
			return eventlog.Session{}, err
		}
		seed = l.Events()
		n := int64(len(seed))
		h.SeedLength = &n
		if len(seed) == 0 || seed[len(seed)-1].Type != eventlog.TypeSessionEndSeed {
			seed = append(seed, endSeed(n, created.UnixMilli()))
		}
	}
	if err := h.Validate(); err != nil {
		return eventlog.Session{}, &eventlog.ValidationError{Seq: -1, Rule: "SES-16", Reason: err.Error()}
	}
	sess := eventlog.Session{ID: p.ID, TenantID: tenantID, PresetID: p.PresetID, PresetVersion: p.PresetVersion,
		Header: h, CreatedAt: created, LastSeq: int64(len(seed)) - 1}
	err := s.inTx(ctx, "create session", func(tx pgx.Tx) error {
		if err := insertSession(ctx, tx, sess); err != nil {
			return err
		}
		if err := insertEvents(ctx, tx, tenantID, sess.ID, seed); err != nil {
			return err
		}
		return syncInbox(ctx, tx, sess.ID)
	})
	if err != nil {
		return eventlog.Session{}, err
	}
	return sess, nil
}

func endSeed(seq, now int64) eventlog.Event {
	return eventlog.Event{Type: eventlog.TypeSessionEndSeed, Seq: seq, Time: now, Data: json.RawMessage(`{}`)}
}

// insertSession inserts the session row and its counter row, with last_seq already covering the
// events the caller inserts in the same transaction.
func insertSession(ctx context.Context, q querier, sess eventlog.Session) error {
	hdr, err := json.Marshal(sess.Header)
	if err != nil {
		return err
	}
	var parent *uuid.UUID
	if id, err := uuid.Parse(sess.Header.ParentSession); err == nil {
		parent = &id
	}
	var pv *int
	if sess.PresetID != nil {
		pv = &sess.PresetVersion
	}
	_, err = q.Exec(ctx, `
		WITH s AS (
			INSERT INTO sessions (id, tenant_id, preset_id, preset_version, header, parent_session, seed_length, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
			RETURNING id
		)
		INSERT INTO session_counters (session_id, last_seq) SELECT id, $9 FROM s`,
		sess.ID, sess.TenantID, sess.PresetID, pv, hdr, parent, sess.Header.SeedLength, sess.CreatedAt, sess.LastSeq)
	return err
}

func scanSession(row pgx.Row) (eventlog.Session, error) {
	var sess eventlog.Session
	var pv *int
	var hdr []byte
	if err := row.Scan(&sess.ID, &sess.TenantID, &sess.PresetID, &pv, &hdr, &sess.CreatedAt, &sess.LastSeq); err != nil {
		return eventlog.Session{}, err
	}
	if pv != nil {
		sess.PresetVersion = *pv
	}
	if err := json.Unmarshal(hdr, &sess.Header); err != nil {
		return eventlog.Session{}, fmt.Errorf("session %s: header: %w", sess.ID, err)
	}
	if err := sess.Header.Validate(); err != nil {
		return eventlog.Session{}, &eventlog.ValidationError{Seq: -1, Rule: "SES-9", Reason: err.Error()}
	}
	return sess, nil
}

// SessionGet returns the session. It returns ErrNotFound for an unknown id, another tenant's
// session or a deleted one, and a *ValidationError (SES-9) for a header of another format version.
func (s *Store) SessionGet(ctx context.Context, tenantID, id uuid.UUID) (eventlog.Session, error) {
	row := s.pool.QueryRow(ctx, `SELECT `+sessionColumns+`
		FROM sessions s JOIN session_counters c ON c.session_id = s.id
		WHERE s.id = $1 AND s.tenant_id = $2 AND s.deleted_at IS NULL`, id, tenantID)
	sess, err := scanSession(row)
	return sess, translate(err, "get session")
}

// Default and maximum page sizes of SessionList.
const (
	DefaultSessionPage = 50
	MaxSessionPage     = 500
)

// SessionList returns the tenant's live sessions, newest first, limit at a time (default 50, at
// most 500). cursor is "" for the first page, then the nextCursor of the previous page; nextCursor
// is "" after the last page. A malformed cursor is a *ValidationError.
func (s *Store) SessionList(ctx context.Context, tenantID uuid.UUID, cursor string, limit int) ([]eventlog.Session, string, error) {
	if limit <= 0 {
		limit = DefaultSessionPage
	}
	limit = min(limit, MaxSessionPage)
	at, after, err := decodeCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+sessionColumns+`
		FROM sessions s JOIN session_counters c ON c.session_id = s.id
		WHERE s.tenant_id = $1 AND s.deleted_at IS NULL AND ($2::timestamptz IS NULL OR (s.created_at, s.id) < ($2, $3))
		ORDER BY s.created_at DESC, s.id DESC LIMIT $4`, tenantID, at, after, limit+1)
	if err != nil {
		return nil, "", translate(err, "list sessions")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (eventlog.Session, error) { return scanSession(r) })
	if err != nil {
		return nil, "", translate(err, "list sessions")
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		last := out[limit-1]
		next = encodeCursor(last.CreatedAt, last.ID)
	}
	return out, next, nil
}

func encodeCursor(t time.Time, id uuid.UUID) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(t.UnixMicro(), 10) + ":" + id.String()))
}

func decodeCursor(c string) (*time.Time, uuid.UUID, error) {
	if c == "" {
		return nil, uuid.Nil, nil
	}
	bad := fault.New(fault.Invalid, "invalid cursor")
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, uuid.Nil, bad
	}
	ts, idStr, ok := strings.Cut(string(b), ":")
	us, err1 := strconv.ParseInt(ts, 10, 64)
	id, err2 := uuid.Parse(idStr)
	if !ok || err1 != nil || err2 != nil || !cursorTime(us) {
		return nil, uuid.Nil, bad
	}
	t := time.UnixMicro(us)
	// Only the canonical spelling is a cursor this store produced (no "+1", braces, urn: ...).
	if encodeCursor(t, id) != c {
		return nil, uuid.Nil, bad
	}
	return &t, id, nil
}

// maxCursorMicros is the end of year 9999 in Unix microseconds: a row's created_at that a cursor
// names lies between 1970 and then, which keeps forged times inside PostgreSQL's timestamp range.
const maxCursorMicros = 253402300799999999

// cursorTime reports whether us (Unix microseconds) can be the created_at of a row.
func cursorTime(us int64) bool { return us >= 0 && us <= maxCursorMicros }

// SessionDelete soft-deletes the session: afterwards it reads as ErrNotFound everywhere and
// appends to it fail with ErrNotFound. Its rows stay in the database. The same statement
// notifies NotifyChannel with seq -1, so the subscribers of the session on every replica re-read
// it (and find it gone) at once.
func (s *Store) SessionDelete(ctx context.Context, tenantID, id uuid.UUID) error {
	var n int
	err := s.pool.QueryRow(ctx, `WITH d AS (
			UPDATE sessions SET deleted_at = $3
			WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL
			RETURNING id)
		SELECT count(*) FROM (SELECT pg_notify('`+NotifyChannel+`', id::text || ':-1') FROM d) n`,
		id, tenantID, s.now()).Scan(&n)
	if err != nil {
		return translate(err, "delete session")
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}
