package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/google/uuid"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// NotifyChannel is the LISTEN/NOTIFY channel of committed appends. The payload is
// "<session id>:<last seq>", one notification per appending transaction; "<session id>:-1" says
// the session changed without an append (it was deleted): its subscribers re-read it.
const NotifyChannel = "dshd_events"

// ErrNotFound and ErrConflict are the journal seam's (eventlog.ErrNotFound, eventlog.ErrConflict):
// the store translates pgx's no-rows and constraint violations into them at this edge.
var (
	ErrNotFound = eventlog.ErrNotFound
	ErrConflict = eventlog.ErrConflict
)

// StoreConfig configures a Store. The zero value is valid.
type StoreConfig struct {
	// Clock stamps event times and session creation. Default time.Now.
	Clock func() time.Time
	// Logger receives store diagnostics. Default slog.Default().
	Logger *slog.Logger
	// CheckInvariants runs the optional SES-10 relational checker on every append. It loads the
	// whole log of the session for each append, so it is meant for tests and debugging. Default
	// false.
	CheckInvariants bool
}

// Store is the PostgreSQL session log. It is safe for concurrent use; the per-session counter row
// serializes concurrent appends to one session.
type Store struct {
	pool   *pgxpool.Pool
	now    func() time.Time
	logger *slog.Logger
	check  bool
	commit atomic.Pointer[CommitFunc]
}

// CommitFunc is told of batches this process committed (see OnCommit). It must not block and must
// not modify evs.
type CommitFunc func(tenantID, sessionID uuid.UUID, evs []eventlog.Event)

// OnCommit registers fn to be told, in this process, of every batch an append committed outside a
// caller's transaction, right after the commit (the notification to every replica is sent by the
// commit itself). A replica's SSE streams use it to skip reading back what the same replica just
// wrote. One function at a time; nil removes it.
func (s *Store) OnCommit(fn CommitFunc) {
	if fn == nil {
		s.commit.Store(nil)
		return
	}
	s.commit.Store(&fn)
}

// committed tells the commit hook of a batch.
func (s *Store) committed(tenantID, sessionID uuid.UUID, evs []eventlog.Event) {
	if fn := s.commit.Load(); fn != nil && len(evs) > 0 {
		(*fn)(tenantID, sessionID, evs)
	}
}

// NewStore returns a store over pool, which must point at a database migrated with
// migrations.Up.
func NewStore(pool *pgxpool.Pool, cfg StoreConfig) *Store {
	s := &Store{pool: pool, now: cfg.Clock, logger: cfg.Logger, check: cfg.CheckInvariants}
	if s.now == nil {
		s.now = time.Now
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	return s
}

// querier is what both a pool and a transaction offer.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// translate maps pgx errors to the package's sentinels (nothing above this package inspects a
// pgx error) and wraps the rest with what was being done.
func translate(err error, what string) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ErrNotFound
	case errors.As(err, &pgErr) && pgErr.Code == "23505": // unique_violation
		return ErrConflict
	case errors.As(err, &pgErr) && pgErr.Code == "23503": // foreign_key_violation
		return ErrNotFound
	case errors.As(err, &pgErr) && pgErr.Code == "22P02": // invalid_text_representation
		return fmt.Errorf("eventlog: %s: invalid input: %s", what, pgErr.Message)
	}
	var ve *eventlog.ValidationError
	var fe *ForkError
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) || errors.As(err, &ve) || errors.As(err, &fe) {
		return err
	}
	return fmt.Errorf("eventlog: %s: %w", what, err)
}

// inTx runs fn in a transaction of the pool, committing when it returns nil.
func (s *Store) inTx(ctx context.Context, what string, fn func(tx pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, s.pool, fn)
	return translate(err, what)
}
