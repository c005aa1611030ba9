package api_test

import (
	"context"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/internal/pgtest"
	"github.com/dshd/dshd/pkg/agentloop"
)

// sqlCounter is a pgx tracer that records the statements a pool sends and the commits that
// write: an explicit COMMIT of a transaction that wrote, or a writing statement (or batch) run
// outside a transaction, which commits by itself. A read-only statement outside a transaction
// commits nothing that has to reach the disk (no WAL flush) and is counted as a statement only.
// Statements of the background work that runs on timers whether or not a turn does (River's
// producers and maintenance, the lease sweeper and renewals, the idempotency key expiry) are set
// apart by their text.
type sqlCounter struct {
	mu      sync.Mutex
	on      bool
	stmts   []string // the counted statements, in order
	commits int
	txs     map[*pgx.Conn]*txState // the transaction open on each connection
}

// txState is what a connection's open transaction has done: its BEGIN is counted with its first
// statement that is not background work (a transaction of background work is left out whole).
type txState struct {
	counted, background, wrote bool
}

// background is the SQL of the work that runs beside turns on a timer.
var background = regexp.MustCompile(`(?is)river_|pg_try_advisory|c\.run_lease_until < now\(\)|` +
	`UPDATE session_counters c SET run_lease_until = now\(\)|DELETE FROM idempotency_keys`)

// writes tells a statement that writes from one that only reads.
var writes = regexp.MustCompile(`(?is)\binsert\s+into\b|\bupdate\s+\w+(\s+\w+)?\s+set\b|\bdelete\s+from\b|dshd_post_idle`)

func (c *sqlCounter) record(conn *pgx.Conn, sql string, inTx bool) {
	sql = strings.Join(strings.Fields(sql), " ")
	low := strings.ToLower(sql)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.on {
		return
	}
	tx := c.txs[conn]
	switch {
	case low == "begin" || strings.HasPrefix(low, "begin "):
		c.txs[conn] = &txState{}
		return
	case low == "commit" || low == "rollback":
		delete(c.txs, conn)
		if tx == nil || tx.background || !tx.counted {
			return
		}
		c.stmts = append(c.stmts, sql)
		if low == "commit" && tx.wrote {
			c.commits++
		}
		return
	}
	if background.MatchString(sql) {
		if tx != nil {
			tx.background = true
		}
		return
	}
	if tx != nil && !tx.background && !tx.counted {
		tx.counted = true
		c.stmts = append(c.stmts, "begin")
	}
	c.stmts = append(c.stmts, sql)
	if writes.MatchString(sql) {
		if inTx && tx != nil {
			tx.wrote = true
		} else if !inTx {
			c.commits++
		}
	}
}

func (c *sqlCounter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.record(conn, d.SQL, conn.PgConn().TxStatus() != 'I')
	return ctx
}

func (c *sqlCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *sqlCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

// A batch is counted statement by statement; one sent outside a transaction would commit as one
// implicit transaction, which the server sends none of.
func (c *sqlCounter) TraceBatchQuery(_ context.Context, conn *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.record(conn, d.SQL, conn.PgConn().TxStatus() != 'I')
}

func (c *sqlCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// measure counts what fn sends.
func (c *sqlCounter) measure(fn func()) (stmts []string, commits int) {
	c.mu.Lock()
	c.on, c.stmts, c.commits, c.txs = true, nil, 0, map[*pgx.Conn]*txState{}
	c.mu.Unlock()
	fn()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = false
	return c.stmts, c.commits
}

// countedEnv is newEnvHosts over a pool whose statements c counts.
func countedEnv(t *testing.T, mockHost string) (*env, *sqlCounter) {
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := &sqlCounter{}
	cfg.ConnConfig.Tracer = c
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// The turn's batches are those its structure makes (docs/architecture.md §4), not those of a
	// model call or a tool that outlasts the coalescing window on a slow machine.
	return newEnvLoop(t, pool, mockHost, nil, func(l *agentloop.Config) { l.ChunkWindow = time.Minute }), c
}

// TestTurnCostStatements pins what a turn costs the database, so that a later feature cannot
// undo the cut silently: the statements and commits of a streamed text, tools:16 and steps:20
// turn on a fresh session, the post and the stream included, counted by a pgx tracer on the
// server's pool.
func TestTurnCostStatements(t *testing.T) {
	m := mockllm.New(mockllm.Config{})
	ms := httptest.NewServer(m.Handler())
	t.Cleanup(func() { m.Close(); ms.Close() })
	u, _ := url.Parse(ms.URL)
	e, c := countedEnv(t, u.Host)
	var p struct{ ID string }
	e.do(t, "POST", "/v1/presets", e.keyA, `{"name":"mock","model":{"provider":"openai","model":"mock","baseUrl":"`+ms.URL+`"}}`).want(t, 201).json(t, &p)
	for _, tc := range []struct {
		script              string
		maxStmts, maxCommit int
	}{
		{"text", 5, 3},
		{"tools:16 tool:echo", 5, 3},
		{"steps:20", 5, 3},
	} {
		// A warm-up turn on another session, so that caches a first turn fills are filled.
		var s struct{ ID string }
		e.do(t, "POST", "/v1/sessions", e.keyA, `{"presetId":"`+p.ID+`"}`).want(t, 201).json(t, &s)
		postStream(t, e.replica, s.ID, e.keyA, `{"content":"`+tc.script+`"}`).untilEnd(t)
		e.do(t, "POST", "/v1/sessions", e.keyA, `{"presetId":"`+p.ID+`"}`).want(t, 201).json(t, &s)
		stmts, commits := c.measure(func() {
			postStream(t, e.replica, s.ID, e.keyA, `{"content":"`+tc.script+`"}`).untilEnd(t)
		})
		for i, q := range stmts {
			t.Logf("%s %d: %.300s", tc.script, i+1, q)
		}
		t.Logf("%s: %d statements, %d commits", tc.script, len(stmts), commits)
		if len(stmts) > tc.maxStmts || commits > tc.maxCommit {
			t.Errorf("%s turn: %d statements and %d commits, want at most %d and %d", tc.script, len(stmts), commits, tc.maxStmts, tc.maxCommit)
		}
	}
}
