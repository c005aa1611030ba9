package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	et "github.com/dshd/dshd/pkg/eventlog/eventlogtest"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dshd/dshd/internal/pgtest"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/pgstore"
)

// logCounter counts the store's log records whose message contains a word.
type logCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *logCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[r.Message]++
	return nil
}
func (c *logCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *logCounter) WithGroup(string) slog.Handler      { return c }

func (c *logCounter) count(word string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for msg, k := range c.n {
		if strings.Contains(msg, word) {
			n += k
		}
	}
	return n
}

// leasedJournal returns a fenced journal of a new session of tenant over st, its owner holding
// the lease.
func leasedJournal(t *testing.T, st *pgstore.Store, tenant uuid.UUID) (*pgstore.Journal, uuid.UUID) {
	t.Helper()
	sess := newSession(t, st, tenant)
	owner := uuid.New()
	if ok, _, err := st.LeaseAcquire(context.Background(), tenant, sess.ID, owner, time.Minute); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	return st.Journal(nil, tenant, sess.ID, owner), sess.ID
}

// marked is a batch of n todo/write events that carry the marker (batch, i).
func marked(batch, n int) eventlog.BuildFunc {
	evs := make([]eventlog.NewEvent, n)
	for i := range evs {
		evs[i] = et.Raw("todo/write", fmt.Sprintf(`{"todos":[],"batch":%d,"i":%d}`, batch, i))
	}
	return eventlog.Batch(evs...)
}

// checkMarked checks that the session's log is exactly the marked batches of sizes, in order,
// each once, with contiguous seqs.
func checkMarked(t *testing.T, st *pgstore.Store, tenant, sid uuid.UUID, sizes []int) {
	t.Helper()
	var evs []eventlog.Event
	after := int64(-1)
	for {
		page, err := st.EventList(context.Background(), tenant, sid, pgstore.ListQuery{After: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, page...)
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].Seq
	}
	k := 0
	for b, n := range sizes {
		for i := range n {
			if k >= len(evs) {
				t.Fatalf("the log ends at event %d, in batch %d (%d batches)", k, b, len(sizes))
			}
			var d struct{ Batch, I int }
			if err := json.Unmarshal(evs[k].Data, &d); err != nil {
				t.Fatal(err)
			}
			if evs[k].Seq != int64(k) || d.Batch != b || d.I != i {
				t.Fatalf("event %d: seq %d, batch %d event %d; want batch %d event %d", k, evs[k].Seq, d.Batch, d.I, b, i)
			}
			k++
		}
	}
	if k != len(evs) {
		t.Fatalf("%d events, want %d (a batch was written twice?)", len(evs), k)
	}
	if s, err := st.SessionGet(context.Background(), tenant, sid); err != nil || s.LastSeq != int64(k-1) {
		t.Fatalf("last seq %d (%v), want %d", s.LastSeq, err, k-1)
	}
}

// TestJournalAppendLostReply: a fenced append whose statement committed but whose reply was lost
// (the connection closed by a proxy right after the server's answer) returns the committed batch,
// and the batch is in the log once: the journal read it back instead of writing it again. A
// statement lost before the commit (mid-transaction) leaves nothing, and the retry writes it
// once.
func TestJournalAppendLostReply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		known bool // the journal knows the head: one optimistic statement
		lose  int  // which statement of the append loses its reply
	}{
		// An optimistic append is one statement, committed at its Sync.
		{name: "optimistic statement committed", known: true, lose: 1},
		// The first append of a journal is a transaction: BEGIN, the locked head, the append,
		// COMMIT.
		{name: "commit of the first append", lose: 4},
		{name: "head read of the first append", lose: 2},
		{name: "append statement of the first append", lose: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			direct := pgtest.Pool(t)
			tenant := newTenant(t, direct)
			proxy := pgtest.NewProxy(t, direct.Config().ConnString())
			cfg, err := pgxpool.ParseConfig(proxy.URL())
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = 1 // every statement on one connection, in order
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			logs := &logCounter{}
			st := pgstore.NewStore(pool, pgstore.StoreConfig{Logger: slog.New(logs)})
			j, sid := leasedJournal(t, st, tenant)
			ctx := context.Background()
			sizes := []int{}
			if tc.known {
				if _, err := j.Append(ctx, marked(0, 2)); err != nil {
					t.Fatal(err)
				}
				sizes = append(sizes, 2)
			}
			lost := proxy.LoseReply(tc.lose)
			got, err := j.Append(ctx, marked(len(sizes), 3))
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-lost:
			default:
				t.Fatal("no reply was lost")
			}
			sizes = append(sizes, 3)
			if len(got) != 3 || got[0].Seq != int64(len(sizes)-1)*2 {
				t.Fatalf("append returned %+v", got)
			}
			// The journal goes on at the right head.
			if _, err := j.Append(ctx, marked(len(sizes), 1)); err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, 1)
			checkMarked(t, st, tenant, sid, sizes)
			if n := logs.count("retrying"); n != 1 {
				t.Errorf("%d retries logged, want 1", n)
			}
			committed := logs.count("reply was lost had committed")
			if want := map[int]int{1: 1, 4: 1}[tc.lose]; committed != want {
				t.Errorf("%d lost replies read back as committed, want %d", committed, want)
			}
		})
	}
}

// TestJournalAppendsSurviveTerminatedBackends: while every connection to the database is
// terminated over and over (pg_terminate_backend: 57P01, then broken connections) for a few
// seconds, a fenced journal appends batch after batch. No append fails, and every batch is in the
// log exactly once, in order, with contiguous seqs.
func TestJournalAppendsSurviveTerminatedBackends(t *testing.T) {
	t.Parallel()
	logs := &logCounter{}
	st, pool, tenant := newStore(t, pgstore.StoreConfig{Logger: slog.New(logs)})
	j, sid := leasedJournal(t, st, tenant)
	ctx := context.Background()
	killer, err := pgx.Connect(ctx, pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer killer.Close(ctx)
	const outage = 3 * time.Second
	var kills atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for end := time.Now().Add(outage); time.Now().Before(end); {
			var n int64
			if err := killer.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
				FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
				t.Error(err)
				return
			}
			kills.Add(n)
			time.Sleep(time.Duration(5+rand.IntN(30)) * time.Millisecond)
		}
	}()
	var sizes []int
	for b := 0; ; b++ {
		select {
		case <-done:
		default:
			n := 1 + rand.IntN(5)
			if _, err := j.Append(ctx, marked(b, n)); err != nil {
				t.Fatalf("batch %d: %v", b, err)
			}
			sizes = append(sizes, n)
			continue
		}
		break
	}
	checkMarked(t, st, tenant, sid, sizes)
	t.Logf("%d batches appended while %d backends were terminated; %d appends retried, %d lost replies read back as committed",
		len(sizes), kills.Load(), logs.count("retrying"), logs.count("reply was lost had committed"))
	if kills.Load() == 0 || logs.count("retrying") == 0 {
		t.Fatal("the outage did not disturb the appends")
	}
}

// TestJournalRetryIsBounded: a fenced append gives up, with an unavailable error, once the
// database has been unreachable for RetryUnavailable; an unfenced append does not retry.
func TestJournalRetryIsBounded(t *testing.T) {
	t.Parallel()
	direct := pgtest.Pool(t)
	tenant := newTenant(t, direct)
	proxy := pgtest.NewProxy(t, direct.Config().ConnString())
	pool, err := pgxpool.New(context.Background(), proxy.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	const bound = 700 * time.Millisecond
	st := pgstore.NewStore(pool, pgstore.StoreConfig{RetryUnavailable: bound, Logger: slog.New(&logCounter{})})
	j, sid := leasedJournal(t, st, tenant)
	ctx := context.Background()
	if _, err := j.Append(ctx, marked(0, 1)); err != nil {
		t.Fatal(err)
	}
	proxy.Down()
	start := time.Now()
	_, err = j.Append(ctx, marked(1, 1))
	took := time.Since(start)
	if !errors.Is(err, fault.ErrUnavailable) || took < bound || took > bound+2*time.Second {
		t.Fatalf("fenced append during the outage: %v after %v, want unavailable after about %v", err, took, bound)
	}
	start = time.Now()
	_, err = st.Journal(nil, tenant, sid, uuid.Nil).Append(ctx, marked(1, 1))
	if took := time.Since(start); !errors.Is(err, fault.ErrUnavailable) || took > bound/2 {
		t.Fatalf("unfenced append during the outage: %v after %v, want unavailable at once", err, took)
	}
	t.Logf("down: fenced gave up after %v", took)
	proxy.Up(t)
	t.Logf("up")
	if _, err := j.Append(ctx, marked(1, 2)); err != nil {
		t.Fatal(err)
	}
	checkMarked(t, st, tenant, sid, []int{1, 2})
}
