package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Fork error codes (docs/rules.md, SES-15).
const (
	ForkSessionNotFound      = "SESSION_NOT_FOUND"
	ForkSessionNotLive       = "SESSION_NOT_LIVE"
	ForkSessionAlreadyExists = "SESSION_ALREADY_EXISTS"
	ForkInvalidBoundary      = "INVALID_BOUNDARY"
	ForkOpenTurn             = "OPEN_TURN"
)

// ForkError is a refused fork (SES-15). Code is one of the Fork* codes.
type ForkError struct {
	Code    string
	Message string
}

// forkFaults maps the SES-15 codes to application error codes.
var forkFaults = map[string]string{
	ForkSessionNotFound:      fault.NotFound,
	ForkSessionAlreadyExists: fault.Conflict,
	ForkSessionNotLive:       fault.SessionNotLive,
	ForkOpenTurn:             fault.OpenTurn,
	ForkInvalidBoundary:      fault.InvalidBoundary,
}

// Unwrap makes a refused fork a fault with the code that corresponds to its SES-15 code.
func (e *ForkError) Unwrap() error {
	code, ok := forkFaults[e.Code]
	if !ok {
		code = fault.Internal
	}
	return &fault.Error{Code: code, Message: e.Code + ": " + e.Message}
}

func (e *ForkError) Error() string { return fmt.Sprintf("eventlog: fork: %s: %s", e.Code, e.Message) }

// Fork creates a live child session from the prefix of source up to and including boundary
// (default: the last event), in one transaction (SES-15). The child's header has parentSession
// and seedLength (the number of copied events) and inherits cwd, owner and the pinned preset; its
// log is the copied prefix followed by session/end-seed unless the prefix ends with one. The
// copied events were validated when they were appended, so the seed rules (SES-12) hold by
// construction and the rows are copied inside the database.
//
// Errors are *ForkError: SESSION_ALREADY_EXISTS (childID taken), SESSION_NOT_FOUND (unknown or
// another tenant's source), SESSION_NOT_LIVE (the tenant's own source was deleted),
// INVALID_BOUNDARY (not a seq of the source), OPEN_TURN (the prefix ends inside an open turn).
func (s *Store) Fork(ctx context.Context, tenantID, sourceID uuid.UUID, boundary *int64, childID *uuid.UUID) (eventlog.Session, error) {
	return s.ForkWithin(ctx, tenantID, sourceID, boundary, childID, ForkBounds{})
}

// ForkBounds are the tenant's quotas a fork is checked against in its own transaction (nil: no
// bound), from Quotas.ForkBounds.
type ForkBounds struct {
	MaxSessions *int64 // live sessions
	MaxLogBytes *int64 // stored bytes of the live sessions' logs
}

// ForkWithin is Fork, refused with a quota_exceeded fault when the child would take the tenant
// past one of b's bounds. The check runs after the copy, in the fork's transaction, and the
// tenant's bounded forks take a transaction lock of the tenant first: concurrent forks are
// decided one after the other, so forks alone never pass the bounds (a fork copies its source's
// bytes, so it is what a soft check would let pass the most). Other writes (creates, appends) do
// not take the lock: with them the bounds stay soft.
func (s *Store) ForkWithin(ctx context.Context, tenantID, sourceID uuid.UUID, boundary *int64, childID *uuid.UUID, b ForkBounds) (eventlog.Session, error) {
	child := uuid.New()
	if childID != nil {
		child = *childID
	}
	bounded := b.MaxSessions != nil || b.MaxLogBytes != nil
	var out eventlog.Session
	err := s.inTx(ctx, "fork", func(tx pgx.Tx) error {
		if bounded {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('dshd forks ' || $1::text, 0))`, tenantID); err != nil {
				return err
			}
		}
		var err error
		if out, err = s.fork(ctx, tx, tenantID, sourceID, boundary, child); err != nil || !bounded {
			return err
		}
		return within(ctx, tx, tenantID, b, "fork")
	})
	return out, err
}

// within refuses a fork or an import (what; in its transaction, after the copy or the insert)
// that took the tenant past b.
func within(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID, b ForkBounds, what string) error {
	var sessions, bytes int64
	err := tx.QueryRow(ctx, `SELECT `+liveSessionsSQL+`, `+liveBytesSQL, tenantID).Scan(&sessions, &bytes)
	switch {
	case err != nil:
		return err
	case b.MaxSessions != nil && sessions > *b.MaxSessions:
		return fault.New(fault.QuotaExceeded, "the %s would make %d live sessions of the tenant, its quota is %d: delete one first", what, sessions, *b.MaxSessions)
	case b.MaxLogBytes != nil && bytes > *b.MaxLogBytes:
		return fault.New(fault.QuotaExceeded, "the %s would take the logs of the tenant's live sessions to %d bytes, its quota is %d: delete sessions first", what, bytes, *b.MaxLogBytes)
	}
	return nil
}

func (s *Store) fork(ctx context.Context, tx pgx.Tx, tenantID, sourceID uuid.UUID, boundary *int64, child uuid.UUID) (eventlog.Session, error) {
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sessions WHERE id = $1)`, child).Scan(&exists); err != nil {
		return eventlog.Session{}, err
	}
	if exists {
		return eventlog.Session{}, &ForkError{ForkSessionAlreadyExists, fmt.Sprintf("session %s already exists", child)}
	}
	src, err := s.forkSource(ctx, tx, tenantID, sourceID)
	if err != nil {
		return eventlog.Session{}, err
	}
	b := src.LastSeq
	if boundary != nil {
		b = *boundary
		if b < 0 || b > src.LastSeq {
			return eventlog.Session{}, &ForkError{ForkInvalidBoundary,
				fmt.Sprintf("boundary %d is not a seq of session %s (last seq %d)", b, sourceID, src.LastSeq)}
		}
	}
	var lastType string
	err = tx.QueryRow(ctx, `SELECT type FROM events WHERE session_id = $1 AND seq <= $2
		AND type IN ('turn/start', 'turn/end') ORDER BY seq DESC LIMIT 1`, sourceID, b).Scan(&lastType)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return eventlog.Session{}, err
	}
	if lastType == eventlog.TypeTurnStart {
		return eventlog.Session{}, &ForkError{ForkOpenTurn, fmt.Sprintf("the prefix through seq %d ends inside an open turn", b)}
	}
	seedLen := b + 1
	now := s.now().Truncate(time.Millisecond)
	h := src.Header
	h.ID, h.CreatedAt, h.ParentSession, h.SeedLength = child.String(), now.UnixMilli(), sourceID.String(), &seedLen
	sess := eventlog.Session{ID: child, TenantID: tenantID, PresetID: src.PresetID, PresetVersion: src.PresetVersion,
		Header: h, CreatedAt: now, LastSeq: b}
	var tail []eventlog.Event
	if b < 0 {
		tail = []eventlog.Event{endSeed(0, now.UnixMilli())}
	} else if ev, err := loadEvent(ctx, tx, sourceID, b); err != nil {
		return eventlog.Session{}, err
	} else if ev.Type != eventlog.TypeSessionEndSeed {
		tail = []eventlog.Event{endSeed(b+1, now.UnixMilli())}
	}
	sess.LastSeq += int64(len(tail))
	if err := insertSession(ctx, tx, sess); err != nil {
		return eventlog.Session{}, err
	}
	// The copied prefix counts in the child's stored bytes (log_bytes, migration 00010).
	if _, err := tx.Exec(ctx, `WITH ins AS (
		INSERT INTO events (session_id, seq, tenant_id, type, time, data, surface_op, source_event_seqs, ignorable)
		SELECT $1, seq, tenant_id, type, time, data, surface_op, source_event_seqs, ignorable
		FROM events WHERE session_id = $2 AND seq <= $3
		RETURNING octet_length(data::text) + coalesce(octet_length(surface_op::text), 0) AS n)
		UPDATE session_counters SET log_bytes = log_bytes + (SELECT coalesce(sum(n), 0) FROM ins) WHERE session_id = $1`,
		child, sourceID, b); err != nil {
		return eventlog.Session{}, err
	}
	if err := insertEvents(ctx, tx, tenantID, child, tail); err != nil {
		return eventlog.Session{}, err
	}
	if err := syncInbox(ctx, tx, child); err != nil {
		return eventlog.Session{}, err
	}
	return sess, notify(ctx, tx, child, sess.LastSeq)
}

func (s *Store) forkSource(ctx context.Context, tx pgx.Tx, tenantID, sourceID uuid.UUID) (eventlog.Session, error) {
	row := tx.QueryRow(ctx, `SELECT `+sessionColumns+`, s.deleted_at IS NOT NULL
		FROM sessions s JOIN session_counters c ON c.session_id = s.id
		WHERE s.id = $1 AND s.tenant_id = $2`, sourceID, tenantID)
	var sess eventlog.Session
	var pv *int
	var hdr []byte
	var deleted bool
	err := row.Scan(&sess.ID, &sess.TenantID, &sess.PresetID, &pv, &hdr, &sess.CreatedAt, &sess.LastSeq, &deleted)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return eventlog.Session{}, &ForkError{ForkSessionNotFound, fmt.Sprintf("session %s not found", sourceID)}
	case err != nil:
		return eventlog.Session{}, err
	case deleted:
		return eventlog.Session{}, &ForkError{ForkSessionNotLive, fmt.Sprintf("session %s was deleted", sourceID)}
	}
	if pv != nil {
		sess.PresetVersion = *pv
	}
	if err := json.Unmarshal(hdr, &sess.Header); err != nil {
		return eventlog.Session{}, err
	}
	return sess, nil
}

// notify queues the NOTIFY of a commit that made lastSeq the session's last seq.
func notify(ctx context.Context, q querier, sessionID uuid.UUID, lastSeq int64) error {
	_, err := q.Exec(ctx, `SELECT pg_notify('`+NotifyChannel+`', $1::text || ':' || $2::bigint)`, sessionID, lastSeq)
	return err
}
