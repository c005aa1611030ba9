package worker_test

import (
	"context"
	"errors"
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

// TestI9F6_TenantMaxTurnsHolds (issue 9, finding 6): with a tenant cap of 3 and 30 sessions
// posted to at once on two replicas, no more than 3 of the tenant's leases are ever held at once
// (sampled continuously), and every session's turn completes.
func TestI9F6_TenantMaxTurnsHolds(t *testing.T) {
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

// TestI9F7_FollowupFloodIsBoundedJobs (issue 9, finding 7): 1,000 followups posted to one
// session at once are served with a bounded number of wake jobs (not one job per post, snoozing
// until the session is idle), and another tenant's turn posted meanwhile completes before the
// flood drains.
func TestI9F7_FollowupFloodIsBoundedJobs(t *testing.T) {
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
				if _, err := r.svc.Post(ctx, e.tenant, sess, llm.NewUserMessage(uuid.NewString(), "text"), worker.ModeFollowup, nil); err != nil {
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

// floodConfig lets a test flood one session: no post rate.
func floodConfig(c *worker.Config) {
	c.SessionPosts = worker.Rate{PerSecond: -1}
	c.TenantPosts = worker.Rate{PerSecond: -1}
}

// TestI9F7_PostRatesAreLimited (issue 9, finding 7): a session's posts beyond its burst are
// refused with rate_limited and the wait until the next token; another session of the tenant
// still posts; the tenant's own bucket bounds all its sessions together.
func TestI9F7_PostRatesAreLimited(t *testing.T) {
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
		_, err = r.svc.Post(ctx, e.tenant, sess, llm.NewUserMessage(uuid.NewString(), "text"), worker.ModeInject, nil)
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
