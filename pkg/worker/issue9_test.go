package worker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
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
