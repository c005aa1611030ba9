package worker_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/worker"
)

// TestTenantMaxTurnsHolds (issue 9, finding 6): with a tenant cap of 3 and 30 sessions
// posted to at once on two replicas, no more than 3 of the tenant's leases are ever held at once
// (sampled continuously), and every session's turn completes.
func TestTenantMaxTurnsHolds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const max, sessions = 3, 30
	capped := func(c *worker.Config) { c.MaxTenantTurns = max }
	reps := []*replica{e.replicaWith(10*time.Second, capped), e.replicaWith(10*time.Second, capped)}
	ids := make([]uuid.UUID, sessions)
	for i := range ids {
		ids[i] = e.session()
	}
	ctx, stop := context.WithCancel(context.Background())
	var peak, samples atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for ctx.Err() == nil {
			n, err := e.store.LeasesHeld(ctx, e.tenant)
			if err != nil {
				continue
			}
			samples.Add(1)
			for {
				p := peak.Load()
				if int64(n) <= p || peak.CompareAndSwap(p, int64(n)) {
					break
				}
			}
		}
	}()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, sid := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			post(t, reps[i%2], e.tenant, sid, `tool:sleep args:{"ms":150,"text":"z"}`, worker.ModeFollowup)
		}()
	}
	close(start)
	wg.Wait()
	for _, sid := range ids {
		e.waitTurnEnds(reps[0].hub, sid, 1, 60*time.Second)
	}
	stop()
	<-sampled
	t.Logf("peak %d leases held over %d samples", peak.Load(), samples.Load())
	if p := peak.Load(); p > max {
		t.Fatalf("%d leases of the tenant were held at once; the cap is %d", p, max)
	}
	if peak.Load() < 2 {
		t.Fatalf("peak %d: the turns did not run concurrently at all", peak.Load())
	}
	for _, sid := range ids {
		if got := reasons(t, e.events(sid)); len(got) != 1 || got[0] != eventlog.EndCompleted {
			t.Fatalf("session %s: reasons %v", sid, got)
		}
	}
}

// otherTenant creates another tenant with a preset and a session of it.
func (e *env) otherTenant() (uuid.UUID, uuid.UUID) {
	e.t.Helper()
	ctx := context.Background()
	tn, _, err := pgstore.NewTenants(e.pool).TenantCreate(ctx, "other")
	if err != nil {
		e.t.Fatal(err)
	}
	b := preset.Body{Name: "p", Model: preset.Model{Provider: preset.ProviderScripted, Model: "scripted-1"}}
	b.Normalize()
	p, err := e.presets.PresetCreate(ctx, tn.ID, b)
	if err != nil {
		e.t.Fatal(err)
	}
	s, err := e.store.SessionCreate(ctx, tn.ID, pgstore.SessionParams{PresetID: &p.ID, PresetVersion: p.Version})
	if err != nil {
		e.t.Fatal(err)
	}
	return tn.ID, s.ID
}

// jobs counts the wake jobs ever inserted and the times they were worked (runs and snoozes).
func (e *env) jobs() (inserted, worked int) {
	e.t.Helper()
	err := e.pool.QueryRow(context.Background(), `SELECT count(*),
		coalesce(sum(attempt + coalesce((metadata->>'snoozes')::int, 0)), 0) FROM river_job WHERE kind = $1`,
		worker.TurnArgs{}.Kind()).Scan(&inserted, &worked)
	if err != nil {
		e.t.Fatal(err)
	}
	return inserted, worked
}

// TestFollowupFloodIsBoundedJobs (issue 9, finding 7): 1,000 followups posted to one
// session at once are served with a bounded number of wake jobs (not one job per post, snoozing
// until the session is idle), and another tenant's turn posted meanwhile completes before the
// flood drains.
func TestFollowupFloodIsBoundedJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.replicaWith(10*time.Second, floodConfig)
	sid := e.session()
	otherTenant, other := e.otherTenant()
	const posts, posters = 1000, 8
	ctx := context.Background()
	sess, err := e.store.SessionGet(ctx, e.tenant, sid)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	var posted atomic.Int64
	for range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for posted.Add(1) <= posts {
				if _, err := r.svc.Post(ctx, e.tenant, sess.ID, llm.NewUserMessage(uuid.NewString(), "text"), worker.ModeFollowup, nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	// The other tenant's turn, posted while the flood is being posted.
	eventually(t, 60*time.Second, func() bool { return posted.Load() >= posts/4 })
	post(t, r, otherTenant, other, "text", worker.ModeFollowup)
	otherPosted := time.Now()
	wake, unsub := r.hub.Subscribe(other)
	for {
		evs, err := e.store.EventList(ctx, otherTenant, other, pgstore.ListQuery{After: -1, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if count(evs, eventlog.TypeTurnEnd) == 1 {
			break
		}
		select {
		case <-wake:
		case <-time.After(100 * time.Millisecond):
		}
	}
	unsub()
	otherTook := time.Since(otherPosted)
	flooded := count(e.events(sid), eventlog.TypeTurnEnd)
	wg.Wait()
	postedIn := time.Since(start)
	e.waitTurnEnds(r.hub, sid, posts, 5*time.Minute)
	drained := time.Since(start)
	e.waitReleased(sid)
	inserted, worked := e.jobs()
	t.Logf("posted in %v, drained in %v; %d jobs inserted, worked %d times; the other tenant's turn took %v, with %d flood turns done",
		postedIn.Round(time.Millisecond), drained.Round(time.Millisecond), inserted, worked, otherTook.Round(time.Millisecond), flooded)
	if flooded >= posts {
		t.Fatalf("the other tenant's turn ended after the flood had drained")
	}
	// A job now and then: the first serve's appends may lose the race with the posts so often
	// that it hands the session over (a wake job); never one job per post.
	if inserted > 25 || worked > 50 {
		t.Fatalf("%d wake jobs inserted, worked %d times, for %d posts to one session; want a bounded number", inserted, worked, posts)
	}
}

// floodConfig lets a test flood one session: no post rate, no bound of the inbox's count (its
// bytes are bounded as by default).
func floodConfig(c *worker.Config) {
	c.SessionPosts = worker.Rate{PerSecond: -1}
	c.TenantPosts = worker.Rate{PerSecond: -1}
	c.InboxMaxMessages = -1
}

// TestPostRatesAreLimited (issue 9, finding 7): a session's posts beyond its burst are
// refused with rate_limited and the wait until the next token; another session of the tenant
// still posts; the tenant's own bucket bounds all its sessions together.
func TestPostRatesAreLimited(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.replicaWith(10*time.Second, func(c *worker.Config) {
		c.SessionPosts = worker.Rate{PerSecond: 0.1, Burst: 3} // a token every 10s
		c.TenantPosts = worker.Rate{PerSecond: 0.1, Burst: 5}
	})
	a, b, c := e.session(), e.session(), e.session()
	ctx := context.Background()
	try := func(sid uuid.UUID) error {
		sess, err := e.store.SessionGet(ctx, e.tenant, sid)
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.svc.Post(ctx, e.tenant, sess.ID, llm.NewUserMessage(uuid.NewString(), "text"), worker.ModeInject, nil)
		return err
	}
	for i := range 3 {
		if err := try(a); err != nil {
			t.Fatalf("post %d within the burst: %v", i, err)
		}
	}
	err := try(a)
	var ra interface{ RetryAfter() time.Duration }
	if fault.Code(err) != fault.RateLimited || !errors.As(err, &ra) || ra.RetryAfter() <= 0 || ra.RetryAfter() > 10*time.Second {
		t.Fatalf("post beyond the session's burst: %v; want rate_limited with a wait of at most 10s", err)
	}
	for i := range 2 {
		if err := try(b); err != nil {
			t.Fatalf("another session's post %d: %v", i, err)
		}
	}
	if err := try(c); fault.Code(err) != fault.RateLimited || !strings.Contains(fault.Message(err), "tenant") {
		t.Fatalf("post beyond the tenant's burst: %v; want rate_limited for the tenant", err)
	}
	if h, err := e.store.SessionHead(ctx, e.tenant, c); err != nil || h.Inbox.NextStep != 0 {
		t.Fatalf("a refused post was appended: %+v %v", h, err)
	}
}

// TestInboxIsBounded (issue 9, finding 2): a session's pending inbox is bounded in bytes and
// in messages: a post beyond the bound is refused with inbox_full and appends nothing; a waking
// post to an idle session is still accepted (it serves, and empties, an inbox of injected
// messages); once served, the inbox takes posts again.
func TestInboxIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const maxBytes = 1 << 20
	r := e.replicaWith(10*time.Second, func(c *worker.Config) {
		floodConfig(c)
		c.InboxMaxBytes = maxBytes
	})
	ctx := context.Background()
	try := func(r *replica, sid uuid.UUID, text, mode string) error {
		sess, err := e.store.SessionGet(ctx, e.tenant, sid)
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.svc.Post(ctx, e.tenant, sess.ID, llm.NewUserMessage(uuid.NewString(), text), mode, nil)
		return err
	}
	sid := e.session()
	big := strings.Repeat("x", 200_000)
	accepted := 0
	for ; accepted < 20; accepted++ {
		if err := try(r, sid, big, worker.ModeInject); err != nil {
			if fault.Code(err) != fault.InboxFull {
				t.Fatalf("post %d: %v; want inbox_full", accepted, err)
			}
			break
		}
	}
	msgs, bytes, err := e.store.InboxPending(ctx, e.tenant, sid)
	t.Logf("%d posts of 200 kB accepted: %d messages, %d bytes pending", accepted, msgs, bytes)
	if err != nil || accepted == 0 || msgs != accepted || bytes%int64(accepted) != 0 || int64(accepted) != maxBytes/(bytes/int64(accepted)) {
		t.Fatalf("%d posts of 200 kB accepted, pending %d messages, %d bytes (%v); want the 1 MiB bound to refuse the first beyond it",
			accepted, msgs, bytes, err)
	}
	if err := try(r, sid, "text", worker.ModeFollowup); err != nil {
		t.Fatalf("a followup to the idle session with a full inbox: %v; want it accepted (it serves the inbox)", err)
	}
	e.waitTurnEnds(r.hub, sid, 1, 60*time.Second)
	e.waitReleased(sid)
	if msgs, bytes, err := e.store.InboxPending(ctx, e.tenant, sid); err != nil || msgs != 0 || bytes != 0 {
		t.Fatalf("after the turn: %d messages, %d bytes pending (%v)", msgs, bytes, err)
	}
	if err := try(r, sid, big, worker.ModeInject); err != nil {
		t.Fatalf("a post once the inbox was served: %v", err)
	}

	// The count bound; a busy session takes no waking post beyond it either.
	few := e.replicaWith(10*time.Second, func(c *worker.Config) { floodConfig(c); c.InboxMaxMessages = 3 })
	sid = e.session()
	if err := try(few, sid, `tool:sleep args:{"ms":60000,"text":"z"}`, worker.ModeFollowup); err != nil {
		t.Fatal(err)
	}
	e.waitFor(few.hub, sid, eventlog.TypeToolCall)
	for i := range 3 {
		if err := try(few, sid, "text", worker.ModeFollowup); err != nil {
			t.Fatalf("post %d within the bound: %v", i, err)
		}
	}
	for _, mode := range []string{worker.ModeInject, worker.ModeSteer, worker.ModeFollowup} {
		if err := try(few, sid, "text", mode); fault.Code(err) != fault.InboxFull {
			t.Fatalf("a %s beyond 3 waiting messages: %v; want inbox_full", mode, err)
		}
	}
	if msgs, _, err := e.store.InboxPending(ctx, e.tenant, sid); err != nil || msgs != 3 {
		t.Fatalf("%d messages pending (%v); want the refused posts to append nothing", msgs, err)
	}
	if _, err := few.svc.Cancel(ctx, e.tenant, sid, false); err != nil {
		t.Fatal(err)
	}
}

// heapInUse is the live heap after collecting garbage.
func heapInUse() int64 {
	var m runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestRunnerCacheAccountsWhatItHolds (issue 9, finding 2): the runner cache accounts for
// the memory a kept runner really holds (measured: the live heap it frees when dropped), not
// only its event data, for a log of large posted messages and for one of tool steps; a runner
// that alone would hold more than an eighth of the cache is not kept. Not parallel: it measures
// the heap.
func TestRunnerCacheAccountsWhatItHolds(t *testing.T) {
	e := newEnv(t)
	r := e.replicaWith(10*time.Second, floodConfig)
	ctx := context.Background()
	measure := func(name string, sid uuid.UUID) {
		t.Helper()
		e.waitReleased(sid)
		eventually(t, 10*time.Second, func() bool { n, _ := r.svc.CachedBytes(); return n == 1 })
		_, accounted := r.svc.CachedBytes()
		before := heapInUse()
		r.svc.DropCachedRunner(sid)
		held := before - heapInUse()
		t.Logf("%s: %d events; the cache accounts %d bytes, the runner held %d", name, len(e.events(sid)), accounted, held)
		if int64(accounted) < held || int64(accounted) > 5*held/2 {
			t.Fatalf("%s: the cache accounts %d bytes for a runner that holds %d", name, accounted, held)
		}
	}
	large := e.session()
	sess, err := e.store.SessionGet(ctx, e.tenant, large)
	if err != nil {
		t.Fatal(err)
	}
	for range 12 {
		msg := llm.NewUserMessage(uuid.NewString(), strings.Repeat("x", 256<<10-200))
		if _, err := r.svc.Post(ctx, e.tenant, sess.ID, msg, worker.ModeInject, nil); err != nil {
			t.Fatal(err)
		}
	}
	post(t, r, e.tenant, large, "text", worker.ModeFollowup)
	e.waitTurnEnds(r.hub, large, 1, 60*time.Second)
	measure("large messages", large)

	steps := e.session()
	for i := range 12 {
		post(t, r, e.tenant, steps, "tools:3 steps:2 say:"+strings.Repeat("word%20", 300), worker.ModeFollowup)
		e.waitTurnEnds(r.hub, steps, i+1, 60*time.Second)
	}
	measure("tool steps", steps)

	small := e.replicaWith(10*time.Second, func(c *worker.Config) { floodConfig(c); c.CachedBytes = 32 << 20 })
	post(t, small, e.tenant, large, "text", worker.ModeFollowup)
	e.waitTurnEnds(small.hub, large, 2, 60*time.Second)
	e.waitReleased(large)
	if n, _ := small.svc.CachedBytes(); n != 0 {
		t.Fatal("a runner of more than an eighth of the cache was kept")
	}
}
