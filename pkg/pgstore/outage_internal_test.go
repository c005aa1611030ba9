package pgstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dshd/dshd/internal/pgtest"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/tenant"
)

// TestTransientErrorsAreUnavailable: the errors a database outage really produces are
// translated to fault.Unavailable (the API's 503), and the others are not.
func TestTransientErrorsAreUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	url := pool.Config().ConnString()

	// Connection refused: nothing listens on the port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	refusedCfg, err := pgxpool.ParseConfig("postgres://postgres@" + closed + "/x?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	refused, err := pgxpool.NewWithConfig(ctx, refusedCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer refused.Close()
	_, refusedErr := refused.Exec(ctx, "SELECT 1")

	// 57P01: the backend is terminated (as by a server shutdown).
	victim, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close(ctx)
	if _, err := pool.Exec(ctx, "SELECT pg_terminate_backend($1)", victim.PgConn().PID()); err != nil {
		t.Fatal(err)
	}
	_, terminatedErr := victim.Exec(ctx, "SELECT 1")
	_, afterErr := victim.Exec(ctx, "SELECT 1") // the connection is closed now

	// The connection is cut mid-session (a network failure): the proxy goes down.
	proxy := pgtest.NewProxy(t, url)
	cut, err := pgx.Connect(ctx, proxy.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer cut.Close(ctx)
	proxy.Down()
	_, cutErr := cut.Exec(ctx, "SELECT 1")

	// A pool acquire timeout: the pool's only connection is busy.
	oneCfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	oneCfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(ctx, oneCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	held, err := one.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, acquireErr := one.Exec(short, "SELECT 1")
	cancel()
	held.Release()

	_, syntaxErr := pool.Exec(ctx, "SELEC 1")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, cancelErr := pool.Exec(cancelled, "SELECT 1")

	for _, tc := range []struct {
		name        string
		err         error
		unavailable bool
	}{
		{"connection refused", refusedErr, true},
		{"57P01 admin shutdown", terminatedErr, true},
		{"closed connection", afterErr, true},
		{"connection cut", cutErr, true},
		{"pool acquire timeout", acquireErr, true},
		{"57P03 cannot connect now", &pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}, true},
		{"08006 connection failure", fmt.Errorf("x: %w", &pgconn.PgError{Code: "08006"}), true},
		{"08P01 protocol violation", &pgconn.PgError{Code: "08P01"}, true},
		{"syntax error", syntaxErr, false},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"cancelled by the caller", cancelErr, false},
		{"no rows", pgx.ErrNoRows, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("no error to classify")
			}
			got := translate(tc.err, "test")
			if errors.Is(got, fault.ErrUnavailable) != tc.unavailable {
				t.Fatalf("translate(%v) = %v (code %s), want unavailable %v", tc.err, got, fault.Code(got), tc.unavailable)
			}
			if tc.unavailable && !errors.Is(got, tc.err) {
				t.Errorf("translate(%v) = %v does not wrap the cause", tc.err, got)
			}
		})
	}
	var pgErr *pgconn.PgError
	if !errors.As(terminatedErr, &pgErr) || pgErr.Code != "57P01" {
		t.Errorf("the terminated backend answered %v, want 57P01", terminatedErr)
	}

	// Every store answers unavailable over an unreachable database: the API's 503.
	st := NewStore(refused, StoreConfig{})
	if _, err := st.SessionGet(ctx, uuid.New(), uuid.New()); !errors.Is(err, fault.ErrUnavailable) {
		t.Errorf("SessionGet: %v", err)
	}
	if _, err := NewTenants(refused).KeyAuthenticate(ctx, tenant.KeyPrefix+"x"); !errors.Is(err, fault.ErrUnavailable) {
		t.Errorf("KeyAuthenticate: %v", err)
	}
	if _, err := NewPresets(refused, preset.Rules{}).PresetGet(ctx, uuid.New(), uuid.New()); !errors.Is(err, fault.ErrUnavailable) {
		t.Errorf("PresetGet: %v", err)
	}
}

// TestAppendOutcomeReadBack: the read-back of an append whose reply was lost tells a batch that
// committed from one that did not, also when another writer's event took the seq.
func TestAppendOutcomeReadBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	st := NewStore(pool, StoreConfig{})
	tn, _, err := NewTenants(pool).TenantCreate(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := st.SessionCreate(ctx, tn.ID, SessionParams{})
	if err != nil {
		t.Fatal(err)
	}
	owner := uuid.New()
	if ok, _, err := st.LeaseAcquire(ctx, tn.ID, sess.ID, owner, time.Minute); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	batch := func(h eventlog.Head, tag string) appendParams {
		t.Helper()
		p, err := st.buildAt(ctx, pool, tn.ID, sess.ID, h, &owner, eventlog.Batch(
			eventlog.NewEvent{Type: "todo/write", Data: map[string]any{"todos": []any{}, "tag": tag}},
			eventlog.NewEvent{Type: "todo/write", Data: map[string]any{"todos": []any{}, "tag": tag + "'"}}))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	outcome := func(p appendParams) bool {
		t.Helper()
		ok, held, err := appendOutcome(ctx, pool, p)
		if err != nil {
			t.Fatal(err)
		}
		if held == nil || *held != owner {
			t.Errorf("lease owner %v, want %v", held, owner)
		}
		return ok
	}
	h, err := st.SessionHead(ctx, tn.ID, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	p := batch(h, "a")
	if outcome(p) {
		t.Fatal("a batch never sent reads back as committed")
	}
	if _, err := appendRows(ctx, pool, p); err != nil {
		t.Fatal(err)
	}
	if !outcome(p) {
		t.Fatal("a committed batch reads back as not committed")
	}
	// A batch built for the same head, with other data or another time, did not commit: the seq
	// holds another batch's event.
	if outcome(batch(h, "b")) {
		t.Fatal("another batch at the same seq reads back as committed")
	}
	q := p
	q.Batch = append([]eventlog.Event(nil), p.Batch...)
	q.Batch[0].Time++
	if outcome(q) {
		t.Fatal("an event with another time reads back as committed")
	}
	// Past the end of the log.
	h2, err := st.SessionHead(ctx, tn.ID, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if outcome(batch(h2, "c")) {
		t.Fatal("a batch past the end of the log reads back as committed")
	}
}
