package worker_test

import (
	"context"
	"testing"
	"time"

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
	wantOneTurnAtATime(t, e, r)
}
