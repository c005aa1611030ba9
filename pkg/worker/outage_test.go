package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dshd/dshd/internal/pgtest"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/worker"
)

// envOn is newEnv over pool (a database of the test's own cluster, or one behind a proxy): a
// tenant and a scripted preset that allows 100 steps per turn.
func envOn(t *testing.T, pool *pgxpool.Pool) *env {
	t.Helper()
	ctx := context.Background()
	tn, _, err := pgstore.NewTenants(pool).TenantCreate(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	ps := pgstore.NewPresets(pool, preset.Rules{})
	steps := 100
	b := preset.Body{Name: "p", Model: preset.Model{Provider: preset.ProviderScripted, Model: "scripted-1"},
		Limits: preset.Limits{MaxSteps: &steps}}
	b.Normalize()
	p, err := ps.PresetCreate(ctx, tn.ID, b)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, pool: pool, store: pgstore.NewStore(pool, pgstore.StoreConfig{}), presets: ps, tenant: tn.ID, preset: p}
}

func newPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// messages counts a logger's records by message.
type messages struct {
	mu sync.Mutex
	n  map[string]int
}

func (m *messages) Enabled(context.Context, slog.Level) bool { return true }
func (m *messages) Handle(_ context.Context, r slog.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[string]int{}
	}
	m.n[r.Message]++
	return nil
}
func (m *messages) WithAttrs([]slog.Attr) slog.Handler { return m }
func (m *messages) WithGroup(string) slog.Handler      { return m }

func (m *messages) count(word string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for msg, k := range m.n {
		if strings.Contains(msg, word) {
			n += k
		}
	}
	return n
}

// longTurn is a turn of 50 tool steps of one sleep call each (about 100 ms per step).
const longTurn = `tools:1 steps:50 tool:sleep args:{"ms":100,"text":"z"}`

// checkEveryCallAnsweredOnce checks a log whose one turn made calls tool calls: contiguous seqs,
// the invariants, and exactly one result for every call.
func checkEveryCallAnsweredOnce(t *testing.T, evs []eventlog.Event, calls int) {
	t.Helper()
	for i, ev := range evs {
		if ev.Seq != int64(i) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
	}
	if err := eventlog.CheckInvariants(evs); err != nil {
		t.Fatal(err)
	}
	answered := map[string]int{}
	called := map[string]int{}
	for _, ev := range evs {
		switch ev.Type {
		case eventlog.TypeToolCall:
			var d struct {
				CallID string `json:"callId"`
			}
			_ = json.Unmarshal(ev.Data, &d)
			called[d.CallID]++
		case eventlog.TypeToolResult:
			d, err := eventlog.Decode[eventlog.ToolResult](ev)
			if err != nil {
				t.Fatal(err)
			}
			if d.Error != nil {
				t.Errorf("call %s failed: %+v", d.Message.Source.CallID, d.Error)
			}
			answered[d.Message.Source.CallID]++
		}
	}
	if len(called) != calls || len(answered) != calls {
		t.Fatalf("%d calls, %d answered, want %d each", len(called), len(answered), calls)
	}
	for id, n := range called {
		if n != 1 || answered[id] != 1 {
			t.Fatalf("call %s: %d calls, %d results", id, n, answered[id])
		}
	}
}

// waitCount waits until the session's log (read through store) holds n events of type typ.
func waitCount(t *testing.T, store *pgstore.Store, tenant, sid uuid.UUID, typ string, n int) int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		evs, err := store.EventList(context.Background(), tenant, sid, pgstore.ListQuery{After: -1, Limit: 1000})
		if err == nil && count(evs, typ) >= n {
			return evs[len(evs)-1].Seq
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %d %s events within 30s (%v)", n, typ, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTurnSurvivesDatabaseRestart: PostgreSQL is stopped (a fast shutdown: every connection is
// terminated with 57P01, new ones are refused, then 57P03 while it starts) for several seconds in
// the middle of a turn of 50 tool steps, and started again. The turn pauses and goes on: it ends
// completed, every call answered exactly once, with contiguous seqs and the log's invariants.
// Once the lease outlives the outage; once it expires during it, and the runner keeps it (it was
// not taken over: no sweeper runs).
func TestTurnSurvivesDatabaseRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		ttl    time.Duration
		sweep  time.Duration
		outage time.Duration
	}{
		{name: "lease outlives the outage", ttl: 10 * time.Second, sweep: 200 * time.Millisecond, outage: 5 * time.Second},
		{name: "lease expires during the outage", ttl: 2 * time.Second, sweep: time.Hour, outage: 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewCluster(t)
			e := envOn(t, newPool(t, db.URL()))
			logs := &messages{}
			r := e.replicaWith(tc.ttl, func(c *worker.Config) {
				c.SweepInterval = tc.sweep
				c.Logger = slog.New(logs)
			})
			sid := e.session()
			post(t, r, e.tenant, sid, longTurn, worker.ModeFollowup)
			waitCount(t, e.store, e.tenant, sid, eventlog.TypeToolResult, 10)
			db.Stop(t)
			stopped := time.Now()
			time.Sleep(tc.outage)
			db.Start(t)
			t.Logf("database down for %v", time.Since(stopped).Round(time.Millisecond))
			evs := e.waitTurnEnds(r.hub, sid, 1, 60*time.Second)
			t.Logf("the turn ended %v after the database came back", time.Since(stopped.Add(tc.outage)).Round(time.Millisecond))
			if got := reasons(t, evs); len(got) != 1 || got[0] != eventlog.EndCompleted {
				t.Fatalf("turn ends %v, want one completed", got)
			}
			checkEveryCallAnsweredOnce(t, evs, 50)
			if n := logs.count("lease lost"); n != 0 {
				t.Errorf("the runner lost its lease (%d)", n)
			}
			if logs.count("lease renewal failed") == 0 {
				t.Error("no renewal failed: the outage was not seen")
			}
			if tc.ttl < tc.outage && logs.count("lease may have expired") == 0 {
				t.Error("the lease was not seen to expire")
			}
			e.waitReleased(sid)
		})
	}
}

// TestLeaseTakenOverDuringOutageStopsRunner: the runner's database is unreachable (a proxy is
// down) for longer than its lease, and meanwhile another owner takes the expired lease over.
// When the database is back, the runner learns it lost the lease and stops: it appends nothing
// more, and its last batch, built before the takeover, is refused.
func TestLeaseTakenOverDuringOutageStopsRunner(t *testing.T) {
	t.Parallel()
	direct := pgtest.Pool(t)
	proxy := pgtest.NewProxy(t, direct.Config().ConnString())
	e := envOn(t, newPool(t, proxy.URL()))
	logs := &messages{}
	const ttl = time.Second
	r := e.replicaWith(ttl, func(c *worker.Config) {
		c.SweepInterval = time.Hour
		c.Logger = slog.New(logs)
	})
	sid := e.session()
	post(t, r, e.tenant, sid, longTurn, worker.ModeFollowup)
	store := pgstore.NewStore(direct, pgstore.StoreConfig{})
	waitCount(t, store, e.tenant, sid, eventlog.TypeToolResult, 5)
	proxy.Down()
	time.Sleep(ttl + 500*time.Millisecond)
	thief := uuid.New()
	ctx := context.Background()
	// The lease expires a TTL after its last renewal, which the outage stops; a renewal still in
	// flight when the proxy went down may have moved it a little later.
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		ok, _, err := store.LeaseAcquire(ctx, e.tenant, sid, thief, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Since(start) > 10*ttl {
			t.Fatal("the expired lease was not taken over")
		}
	}
	h, err := store.SessionHead(ctx, e.tenant, sid)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Up(t)
	deadline := time.Now().Add(20 * time.Second)
	for logs.count("lease lost") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the runner did not see that it lost the lease")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second) // time for an append that should not happen
	after, err := store.SessionHead(ctx, e.tenant, sid)
	if err != nil {
		t.Fatal(err)
	}
	if after.Next != h.Next || after.Lease.Owner != thief.String() {
		t.Fatalf("after the takeover the log went from %d to %d events and the lease is %q's; want no append and the thief's lease",
			h.Next, after.Next, after.Lease.Owner)
	}
	t.Logf("the runner stopped: %d lease-lost reports, the log stayed at %d events", logs.count("lease lost"), after.Next)
}
