package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/tenant"
	"github.com/dshd/dshd/pkg/worker"
)

// TestTenantTurnCapFromItsLimits: a tenant's own maxConcurrentTurns (1) replaces the server's
// MaxTenantTurns (20): its second session waits until its first turn has ended.
func TestTenantTurnCapFromItsLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := pgstore.NewQuotas(e.pool, pgstore.QuotasConfig{})
	one := 1
	if err := q.LimitsSet(context.Background(), e.tenant, tenant.Limits{MaxConcurrentTurns: &one}); err != nil {
		t.Fatal(err)
	}
	r := e.replicaWith(10*time.Second, func(c *worker.Config) { c.MaxTenantTurns = 20; c.Quotas = q })
	first, second := e.session(), e.session()
	post(t, r, e.tenant, first, `tool:sleep args:{"ms":800,"text":"z"}`, worker.ModeFollowup)
	e.waitFor(r.hub, first, eventlog.TypeToolCall)
	post(t, r, e.tenant, second, "text", worker.ModeFollowup)
	a := e.waitTurnEnds(r.hub, first, 1, 20*time.Second)
	b := e.waitTurnEnds(r.hub, second, 1, 20*time.Second)
	var firstEnd, secondStart int64
	for _, ev := range a {
		if ev.Type == eventlog.TypeTurnEnd {
			firstEnd = ev.Time
		}
	}
	for _, ev := range b {
		if ev.Type == eventlog.TypeTurnStart {
			secondStart = ev.Time
		}
	}
	if secondStart < firstEnd {
		t.Fatalf("the second session's turn started at %d, before the first one ended at %d", secondStart, firstEnd)
	}
}
