package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dshd/dshd/internal/pgtest"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/tenant"
)

// statements counts the statements a pool sends (a pgx tracer).
type statements struct{ n atomic.Int64 }

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// countedPool opens another pool on url whose statements are counted.
func countedPool(t *testing.T, url string) (*pgxpool.Pool, *statements) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	st := &statements{}
	cfg.ConnConfig.Tracer = st
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, st
}

// rateRow is a tenant's tenant_rates row: its tat and the transaction that last wrote it.
func rateRow(t *testing.T, pool *pgxpool.Pool, tn uuid.UUID) string {
	t.Helper()
	var xmin string
	var tat int64
	if err := pool.QueryRow(context.Background(), `SELECT xmin::text, tat_us FROM tenant_rates WHERE tenant_id = $1`, tn).Scan(&xmin, &tat); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("xmin %s tat %d", xmin, tat)
}

// TestRateTakeIsAGCRA: a burst is allowed at once with RateLimit numbers counting down; the next
// request is refused by the database with the wait until one is allowed, and that refusal writes
// nothing; the process remembers it, so the tenant's next requests within the wait are refused
// without a statement (unless the rate changed). Tenants do not share a limiter. Once the wait has
// passed, a request is allowed again.
func TestRateTakeIsAGCRA(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool, tn := newStore(t, pgstore.StoreConfig{})
	other, quick := newTenant(t, pool), newTenant(t, pool)
	counted, stmts := countedPool(t, pool.Config().ConnString())
	q := pgstore.NewQuotas(counted, pgstore.QuotasConfig{})
	const rate, burst = 0.1, 4 // a request every 10 s: the test's own pace cannot refill one
	for i := range burst {
		d, err := q.RateTake(ctx, tn, rate, burst)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed || d.Limit != burst || d.Remaining != burst-1-i || d.Reset <= 0 || d.Reset > time.Duration(i+1)*10*time.Second {
			t.Fatalf("request %d of the burst: %+v", i, d)
		}
	}
	row := rateRow(t, pool, tn)
	n := stmts.n.Load()
	d, err := q.RateTake(ctx, tn, rate, burst)
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 || d.RetryAfter > 10*time.Second || stmts.n.Load() != n+1 {
		t.Fatalf("past the burst: %+v after %d statements", d, stmts.n.Load()-n)
	}
	if got := rateRow(t, pool, tn); got != row {
		t.Fatalf("a refusal wrote the row: %s, was %s", got, row)
	}
	for range 3 {
		again, err := q.RateTake(ctx, tn, rate, burst)
		if err != nil || again.Allowed || again.RetryAfter <= 0 || again.RetryAfter > d.RetryAfter || again.Reset <= 0 || again.Limit != burst {
			t.Fatalf("a remembered refusal: %+v %v (the first: %+v)", again, err, d)
		}
	}
	if got := stmts.n.Load(); got != n+1 {
		t.Fatalf("remembered refusals ran %d statements", got-n-1)
	}
	if d, err := q.RateTake(ctx, tn, 2*rate, burst); err != nil || d.Allowed || stmts.n.Load() != n+2 {
		t.Fatalf("another rate is decided by the database (and the row still refuses): %+v %v", d, err)
	}
	if d, err := q.RateTake(ctx, other, rate, burst); err != nil || !d.Allowed || d.Remaining != burst-1 {
		t.Fatalf("another tenant: %+v %v", d, err)
	}
	if got := rateRow(t, pool, tn); got != row {
		t.Fatalf("refusals wrote the row: %s, was %s", got, row)
	}

	// A request a second, one at once: the wait is at most a second; once it has passed, the
	// remembered refusal is over and the database allows one again.
	if d, err := q.RateTake(ctx, quick, 1, 1); err != nil || !d.Allowed {
		t.Fatalf("quick: %+v %v", d, err)
	}
	d, err = q.RateTake(ctx, quick, 1, 1)
	if err != nil || d.Allowed || d.RetryAfter > time.Second {
		t.Fatalf("quick, again at once: %+v %v", d, err)
	}
	time.Sleep(d.RetryAfter + 20*time.Millisecond)
	if d, err := q.RateTake(ctx, quick, 1, 1); err != nil || !d.Allowed {
		t.Fatalf("after the wait: %+v %v", d, err)
	}
}

// TestRateTakeHoldsUnderConcurrency: limiters of two "replicas" (two Quotas over two pools of one
// database, each remembering its refusals) hammered by many goroutines allow, together, never
// more than the burst plus the rate over the measured time, and not less than 90% of the rate.
func TestRateTakeHoldsUnderConcurrency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool, tn := newStore(t, pgstore.StoreConfig{})
	p1, s1 := countedPool(t, pool.Config().ConnString())
	p2, s2 := countedPool(t, pool.Config().ConnString())
	qs := []*pgstore.Quotas{pgstore.NewQuotas(p1, pgstore.QuotasConfig{}), pgstore.NewQuotas(p2, pgstore.QuotasConfig{})}
	const rate, burst = 50.0, 10
	var allowed, refused atomic.Int64
	start := time.Now()
	stop := start.Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func(q *pgstore.Quotas) {
			defer wg.Done()
			for time.Now().Before(stop) {
				d, err := q.RateTake(ctx, tn, rate, burst)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
				} else {
					refused.Add(1)
				}
				time.Sleep(500 * time.Microsecond) // remembered refusals take no time at all
			}
		}(qs[i%2])
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	hi, lo := rate*elapsed+burst, rate*elapsed*0.9
	n := float64(allowed.Load())
	t.Logf("%v allowed, %d refused in %.2fs, %d statements", n, refused.Load(), elapsed, s1.n.Load()+s2.n.Load())
	if n > hi || n < lo || refused.Load() == 0 {
		t.Fatalf("%v allowed (%d refused) in %.2fs at %v/s with a burst of %d: want %.0f to %.0f",
			n, refused.Load(), elapsed, rate, burst, lo, hi)
	}
}

// TestLimitsCacheSharesReadsAndServesStale: concurrent misses of a tenant's limits share one
// read; while the database is unreachable, limits read before are served (stale), and a tenant
// whose limits were never read fails with unavailable.
func TestLimitsCacheSharesReadsAndServesStale(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct := pgtest.Pool(t)
	tn, unread := newTenant(t, direct), newTenant(t, direct)
	rps := 3.0
	if err := pgstore.NewQuotas(direct, pgstore.QuotasConfig{}).LimitsSet(ctx, tn, tenant.Limits{RequestsPerSecond: &rps}); err != nil {
		t.Fatal(err)
	}
	proxy := pgtest.NewProxy(t, direct.Config().ConnString())
	pool, stmts := countedPool(t, proxy.URL())
	q := pgstore.NewQuotas(pool, pgstore.QuotasConfig{LimitsTTL: 100 * time.Millisecond})
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if l, err := q.Effective(ctx, tn); err != nil || l.RequestsPerSecond == nil || *l.RequestsPerSecond != 3 {
				t.Errorf("effective: %+v %v", l, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if n := stmts.n.Load(); n != 1 {
		t.Fatalf("50 concurrent misses ran %d statements, want 1", n)
	}
	time.Sleep(150 * time.Millisecond)
	proxy.Down()
	if l, err := q.Effective(ctx, tn); err != nil || l.RequestsPerSecond == nil || *l.RequestsPerSecond != 3 {
		t.Fatalf("stale limits during an outage: %+v %v", l, err)
	}
	if _, err := q.Effective(ctx, unread); !errors.Is(err, fault.ErrUnavailable) {
		t.Fatalf("limits never read, during an outage: %v", err)
	}
}

// TestLimitsSetGetAndCache: the operator's limits are stored as set (null fields: the server's
// defaults), validated, and seen by another replica's cache within its TTL.
func TestLimitsSetGetAndCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool, tn := newStore(t, pgstore.StoreConfig{})
	tokens, turns := int64(1000), 3
	defaults := tenant.Limits{TokensPerDay: &tokens, MaxConcurrentTurns: &turns}
	a := pgstore.NewQuotas(pool, pgstore.QuotasConfig{Defaults: defaults})
	b := pgstore.NewQuotas(pool, pgstore.QuotasConfig{Defaults: defaults, LimitsTTL: 200 * time.Millisecond})
	if l, err := b.Effective(ctx, tn); err != nil || l.TokensPerDay == nil || *l.TokensPerDay != 1000 || l.RequestsPerSecond != nil {
		t.Fatalf("defaults: %+v %v", l, err)
	}
	if got := b.MaxTurns(ctx, tn, 20); got != 3 {
		t.Fatalf("max turns from the defaults: %d", got)
	}
	rps, sessions, mine := 5.0, int64(2), 7
	set := tenant.Limits{RequestsPerSecond: &rps, MaxSessions: &sessions, MaxConcurrentTurns: &mine}
	if err := a.LimitsSet(ctx, tn, set); err != nil {
		t.Fatal(err)
	}
	if l, err := a.LimitsGet(ctx, tn); err != nil || *l.RequestsPerSecond != 5 || *l.MaxSessions != 2 || l.TokensPerDay != nil {
		t.Fatalf("get: %+v %v", l, err)
	}
	if l, err := a.Effective(ctx, tn); err != nil || *l.RequestsPerSecond != 5 || *l.TokensPerDay != 1000 || *l.MaxConcurrentTurns != 7 {
		t.Fatalf("effective on the replica that set them: %+v %v", l, err)
	}
	if l, _ := b.Effective(ctx, tn); l.RequestsPerSecond != nil {
		t.Fatalf("the other replica's cache is read within its TTL: %+v", l)
	}
	time.Sleep(250 * time.Millisecond)
	if l, err := b.Effective(ctx, tn); err != nil || l.RequestsPerSecond == nil || *l.RequestsPerSecond != 5 {
		t.Fatalf("the other replica after its TTL: %+v %v", l, err)
	}
	if r, burst, ok := set.Resolve(defaults).Rate(); !ok || r != 5 || burst != 5 {
		t.Fatalf("rate %v burst %d %v", r, burst, ok)
	}
	if err := a.LimitsSet(ctx, uuid.New(), set); !errors.Is(err, tenant.ErrNotFound) {
		t.Fatalf("unknown tenant: %v", err)
	}
	zero := 0.0
	if err := a.LimitsSet(ctx, tn, tenant.Limits{RequestsPerSecond: &zero}); fault.Code(err) != fault.Invalid {
		t.Fatalf("a zero rate: %v", err)
	}
}

// usageTurn is one whole turn with a model call of the given tokens, a retry and a failed tool
// call, as one batch.
func usageTurn(turn int, in, out int64) []eventlog.NewEvent {
	msg := llm.Message{ID: uuid.NewString(), Role: "assistant", Content: []llm.Block{{Type: "text", Text: "ok"}},
		Source: llm.Source{Kind: "model", Provider: "scripted", Model: "m"}}
	return []eventlog.NewEvent{
		{Type: "turn/start", Data: map[string]int{"turn": turn}},
		{Type: "step/start", Data: map[string]int{"turn": turn, "step": 1}},
		{Type: "llm/retry", Data: eventlog.LLMRetry{Turn: turn, Step: 1, Attempt: 1, DelayMs: 1, Code: llm.CodeServer, Message: "x"}},
		{Type: "assistant/message", SurfaceOp: eventlog.Append, Data: eventlog.AssistantMessage{Turn: turn, Step: 1,
			Message: msg, Usage: &llm.Usage{InputTokens: int(in), OutputTokens: int(out), ReasoningTokens: 1}}},
		{Type: "step/end", Data: map[string]int{"turn": turn, "step": 1}},
		{Type: "turn/end", Data: map[string]any{"turn": turn, "reason": map[string]string{"kind": "completed"}}},
	}
}

// TestQuotaChecks: sessions, stored bytes and tokens of the day refuse what they no longer allow,
// each only for what it bounds, with quota_exceeded (tokens with the wait until the next UTC day).
func TestQuotaChecks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tn := newStore(t, pgstore.StoreConfig{})
	q := pgstore.NewQuotas(pool, pgstore.QuotasConfig{})
	for _, what := range []int{pgstore.ForSession, pgstore.ForPost, pgstore.ForTurn} {
		if err := q.Check(ctx, tn, what); err != nil {
			t.Fatalf("no limits, check %d: %v", what, err)
		}
	}
	one, tokens := int64(1), int64(150)
	if err := q.LimitsSet(ctx, tn, tenant.Limits{MaxSessions: &one, TokensPerDay: &tokens}); err != nil {
		t.Fatal(err)
	}
	sess := newSession(t, st, tn)
	if err := q.Check(ctx, tn, pgstore.ForSession); fault.Code(err) != fault.QuotaExceeded {
		t.Fatalf("a second session: %v", err)
	}
	if _, err := appendEvents(st, ctx, tn, sess.ID, usageTurn(1, 100, 20)...); err != nil {
		t.Fatal(err)
	}
	if err := q.Check(ctx, tn, pgstore.ForTurn); err != nil {
		t.Fatalf("120 of 150 tokens: %v", err)
	}
	if _, err := appendEvents(st, ctx, tn, sess.ID, usageTurn(2, 20, 10)...); err != nil {
		t.Fatal(err)
	}
	var wait fault.Wait
	err := q.Check(ctx, tn, pgstore.ForTurn)
	if !errors.As(err, &wait) || fault.Code(err) != fault.QuotaExceeded || wait <= 0 || time.Duration(wait) > 24*time.Hour {
		t.Fatalf("150 of 150 tokens: %v", err)
	}
	if err := q.Check(ctx, tn, pgstore.ForPost); fault.Code(err) != fault.QuotaExceeded {
		t.Fatalf("a post past the token quota: %v", err)
	}
	if st, err := q.Standing(ctx, tn); err != nil || st.Sessions != 1 || st.TokensToday != 150 || st.LogBytes == 0 {
		t.Fatalf("standing %+v %v", st, err)
	}
	bytes := int64(100)
	if err := q.LimitsSet(ctx, tn, tenant.Limits{MaxLogBytes: &bytes}); err != nil {
		t.Fatal(err)
	}
	for _, what := range []int{pgstore.ForSession, pgstore.ForPost} {
		if err := q.Check(ctx, tn, what); fault.Code(err) != fault.QuotaExceeded {
			t.Fatalf("past the stored bytes, check %d: %v", what, err)
		}
	}
	if err := q.Check(ctx, tn, pgstore.ForTurn); err != nil {
		t.Fatalf("stored bytes do not stop a turn: %v", err)
	}
	if err := st.SessionDelete(ctx, tn, sess.ID); err != nil {
		t.Fatal(err)
	}
	if err := q.Check(ctx, tn, pgstore.ForSession); err != nil {
		t.Fatalf("a deleted session's bytes do not count: %v", err)
	}
}

// TestUsageQueries: every grouping sums the same usage rows; pages of sessions and turns add up
// to the total; the range selects turns by their start; another tenant's usage is not seen.
func TestUsageQueries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tn := newStore(t, pgstore.StoreConfig{})
	other := newTenant(t, pool)
	day1 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	day2 := day1.Add(24 * time.Hour)
	at := day1
	clocked := pgstore.NewStore(pool, pgstore.StoreConfig{Clock: func() time.Time { return at }})
	var sessions []uuid.UUID
	for i := range 3 {
		s := newSession(t, st, tn)
		sessions = append(sessions, s.ID)
		for turn := 1; turn <= 2; turn++ {
			at = day1
			if turn == 2 && i > 0 {
				at = day2
			}
			if _, err := appendEvents(clocked, ctx, tn, s.ID, usageTurn(turn, 10, 3)...); err != nil {
				t.Fatal(err)
			}
		}
	}
	at = day1
	os := newSession(t, st, other)
	if _, err := appendEvents(clocked, ctx, other, os.ID, usageTurn(1, 1000, 1000)...); err != nil {
		t.Fatal(err)
	}
	query := func(g, cursor string, limit int, from, to time.Time) pgstore.UsagePage {
		t.Helper()
		p, err := st.Usage(ctx, pgstore.UsageQuery{Tenant: tn, From: from, To: to, GroupBy: g, Cursor: cursor, Limit: limit})
		if err != nil {
			t.Fatalf("%s: %v", g, err)
		}
		return p
	}
	from, to := day1.Truncate(24*time.Hour), day2.Add(24*time.Hour)
	total := query(pgstore.UsageTotal, "", 0, from, to)
	want := eventlog.Usage{InputTokens: 60, OutputTokens: 18, ReasoningTokens: 6, ModelCalls: 12, ModelErrors: 6}
	if len(total.Rows) != 1 || total.Rows[0].Usage != want || total.Rows[0].Turns != 6 || total.Rows[0].RunTimeMs != 0 {
		t.Fatalf("total %+v", total.Rows)
	}
	days := query(pgstore.UsageByDay, "", 0, from, to)
	if len(days.Rows) != 2 || days.Rows[0].Day != "2026-03-01" || days.Rows[0].Turns != 4 || days.Rows[1].Turns != 2 ||
		days.Rows[1].Usage.InputTokens != 20 {
		t.Fatalf("days %+v", days.Rows)
	}
	if p := query(pgstore.UsageByDay, "", 0, day2.Truncate(24*time.Hour), to); len(p.Rows) != 1 || p.Rows[0].Turns != 2 {
		t.Fatalf("the second day only: %+v", p.Rows)
	}
	if p := query(pgstore.UsageTotal, "", 0, to, to.Add(time.Hour)); len(p.Rows) != 1 || p.Rows[0].Turns != 0 || !p.Rows[0].Usage.IsZero() {
		t.Fatalf("an empty range: %+v", p.Rows)
	}
	for _, g := range []string{pgstore.UsageBySession, pgstore.UsageByTurn, pgstore.UsageByPreset} {
		var sum eventlog.Usage
		var turns int64
		pages, cursor := 0, ""
		for {
			p := query(g, cursor, 2, from, to)
			pages++
			for _, r := range p.Rows {
				sum.Add(r.Usage)
				turns += r.Turns
				if g == pgstore.UsageByTurn && (r.StartedAt == nil || r.EndedAt == nil || r.EndKind == nil || *r.EndKind != "completed") {
					t.Fatalf("turn row %+v", r)
				}
			}
			if cursor = p.Next; cursor == "" {
				break
			}
			if pages > 10 {
				t.Fatalf("%s: pages do not end", g)
			}
		}
		if sum != want || turns != 6 {
			t.Fatalf("%s: pages sum to %+v over %d turns, want %+v over 6", g, sum, turns, want)
		}
		wantPages := map[string]int{pgstore.UsageBySession: 2, pgstore.UsageByTurn: 3, pgstore.UsageByPreset: 1}[g]
		if pages != wantPages {
			t.Fatalf("%s: %d pages of 2, want %d", g, pages, wantPages)
		}
	}
	bySession := query(pgstore.UsageBySession, "", 10, from, to)
	if len(bySession.Rows) != 3 || bySession.Rows[0].Turns != 2 {
		t.Fatalf("by session %+v", bySession.Rows)
	}
	for _, r := range bySession.Rows {
		found := false
		for _, s := range sessions {
			found = found || *r.SessionID == s
		}
		if !found {
			t.Fatalf("a session not of the tenant: %v", r.SessionID)
		}
	}
	if _, err := st.Usage(ctx, pgstore.UsageQuery{Tenant: tn, From: from, To: to, GroupBy: pgstore.UsageByTurn, Cursor: "nope"}); fault.Code(err) != fault.Invalid {
		t.Fatalf("a bad cursor: %v", err)
	}
}

// TestForkWithinBounds: concurrent forks checked against the stored-bytes quota in their own
// transactions never take the tenant past it (of six, exactly the two that fit are made), and a
// fork past the session quota is refused; refused forks leave no child.
func TestForkWithinBounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tn := newStore(t, pgstore.StoreConfig{})
	q := pgstore.NewQuotas(pool, pgstore.QuotasConfig{})
	src := newSession(t, st, tn)
	for turn := 1; turn <= 3; turn++ {
		if _, err := appendEvents(st, ctx, tn, src.ID, usageTurn(turn, 10, 3)...); err != nil {
			t.Fatal(err)
		}
	}
	s0, err := q.Standing(ctx, tn)
	if err != nil {
		t.Fatal(err)
	}
	// Each child holds the source's bytes and a session/end-seed: two fit, a third does not.
	maxBytes := s0.LogBytes*3 + s0.LogBytes/2
	var made, refused atomic.Int64
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.ForkWithin(ctx, tn, src.ID, nil, nil, pgstore.ForkBounds{MaxLogBytes: &maxBytes})
			switch {
			case err == nil:
				made.Add(1)
			case fault.Code(err) == fault.QuotaExceeded:
				refused.Add(1)
			default:
				t.Errorf("fork: %v", err)
			}
		}()
	}
	wg.Wait()
	s1, err := q.Standing(ctx, tn)
	if err != nil {
		t.Fatal(err)
	}
	if made.Load() != 2 || refused.Load() != 4 || s1.Sessions != 3 || s1.LogBytes > maxBytes {
		t.Fatalf("%d forks made, %d refused: %+v, quota %d bytes (the source holds %d)", made.Load(), refused.Load(), s1, maxBytes, s0.LogBytes)
	}
	three := int64(3)
	if _, err := st.ForkWithin(ctx, tn, src.ID, nil, nil, pgstore.ForkBounds{MaxSessions: &three}); fault.Code(err) != fault.QuotaExceeded {
		t.Fatalf("a fork past the session quota: %v", err)
	}
	if s, err := q.Standing(ctx, tn); err != nil || s != s1 {
		t.Fatalf("refused forks left %+v, was %+v (%v)", s, s1, err)
	}
}
