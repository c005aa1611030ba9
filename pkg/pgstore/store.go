package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/secretbox"
	"github.com/dshd/dshd/pkg/telemetry"
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
	// RetryUnavailable is how long a fenced append (a turn runner's) keeps retrying while the
	// database is unavailable (connection refused or lost, the server shutting down or starting
	// up) before it fails: an outage shorter than this only pauses a running turn. An append whose
	// outcome is unknown (the connection was lost before the reply) is read back, never written
	// twice. Default DefaultRetryUnavailable; negative: no retry.
	RetryUnavailable time.Duration
	// Metrics counts lease takeovers (and the queue's job waits, QueueConfig.Metrics); nil
	// records nothing.
	Metrics *telemetry.Metrics
	// SecretKeys, when set, encrypt the tenants' webhook signing secrets at rest (the operator's
	// DSHD_CREDENTIAL_KEYS, migration 00014). Nil: they are stored as they are.
	SecretKeys *secretbox.Keyring
}

// DefaultRetryUnavailable is StoreConfig.RetryUnavailable's default.
const DefaultRetryUnavailable = 30 * time.Second

// Store is the PostgreSQL session log. It is safe for concurrent use; the per-session counter row
// serializes concurrent appends to one session.
type Store struct {
	pool   *pgxpool.Pool
	now    func() time.Time
	logger *slog.Logger
	check  bool
	retry  time.Duration // StoreConfig.RetryUnavailable, 0 for none
	commit atomic.Pointer[CommitFunc]
	// slots records, per tenant, how many turn slots are known to exist (runs.go).
	slots sync.Map
	// flying counts the commits being sent or published, per session (inflight.go).
	flying inflight

	metrics *telemetry.Metrics // StoreConfig.Metrics
	secrets *secretbox.Keyring // StoreConfig.SecretKeys
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
	s := &Store{pool: pool, now: cfg.Clock, logger: cfg.Logger, check: cfg.CheckInvariants, retry: cfg.RetryUnavailable,
		metrics: cfg.Metrics, secrets: cfg.SecretKeys}
	switch {
	case s.retry == 0:
		s.retry = DefaultRetryUnavailable
	case s.retry < 0:
		s.retry = 0
	}
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
// pgx error) and wraps the rest with what was being done. A transient error (see transient) is a
// fault.Unavailable error.
func translate(err error, what string) error {
	if err == nil {
		return nil
	}
	if transient(err) {
		return unavailable(err, "eventlog: "+what)
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

// unavailable wraps a transient error as a fault.Unavailable error (the API answers 503).
func unavailable(err error, what string) error {
	if errors.Is(err, fault.ErrUnavailable) {
		return err
	}
	return &fault.Error{Code: fault.Unavailable, Message: "the database is unavailable; retry later",
		Err: fmt.Errorf("%s: %w", what, err)}
}

// dbError is translate for the stores whose not-found and conflict errors are their own
// (tenants, presets): a transient error is a fault.Unavailable error, anything else is wrapped
// with what was being done.
func dbError(err error, what string) error {
	if transient(err) {
		return unavailable(err, what)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// transient reports whether err says the database could not be reached or dropped the
// connection, so that the same operation may succeed later: the server refused or reset the
// connection, closed it (shutdown: 57P01, crash of another backend: 57P02), is starting up or
// shutting down (57P03), a connection exception (class 08), the connection was lost mid-statement
// (EOF), or no connection was had in time (a pool acquire or connect timeout). A cancelled
// context is not transient: the caller gave up.
func transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, fault.ErrUnavailable) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08") // connection_exception and its subclasses
	}
	var netErr net.Error
	var connErr *pgconn.ConnectError
	switch {
	case errors.As(err, &connErr), errors.As(err, &netErr):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, pgconn.ErrConnClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE):
		return true
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err):
		return true // no connection in time (pool acquire, connect) or no answer in time
	}
	return false
}

// inTx runs fn in a transaction of the pool, committing when it returns nil.
func (s *Store) inTx(ctx context.Context, what string, fn func(tx pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, s.pool, fn)
	return translate(err, what)
}
