package pgstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dshd/dshd/internal/pgtest"
)

// TestMetricsQueueCountCached: dshd_queue_jobs counts the turns queue in the database, but
// scrapes within QueueCountTTL of a count share it (a job added meanwhile shows only after the
// TTL), and concurrent scrapes run one query between them (the pool's acquisitions say so).
func TestMetricsQueueCountCached(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	st := NewStore(pool, StoreConfig{})
	var mu sync.Mutex
	now := time.Now()
	qc := &queueCollector{s: st, now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(qc)
	addJob := func(state string) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at)
			VALUES ('{}', 'dshd_turn', 25, $1, $2::river_job_state, now() + interval '1 hour')`, QueueName, state); err != nil {
			t.Fatal(err)
		}
	}
	available := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "state" && l.GetValue() == "available" {
						return m.GetGauge().GetValue()
					}
				}
			}
		}
		t.Fatal("no dshd_queue_jobs{state=available}")
		return 0
	}

	addJob("available")
	if n := available(); n != 1 {
		t.Fatalf("available %v, want 1", n)
	}
	if n := testutil.CollectAndCount(qc); n != len(queueStates) {
		t.Errorf("%d series, want one per state (%d)", n, len(queueStates))
	}
	addJob("available")
	if n := available(); n != 1 {
		t.Errorf("available %v within the TTL, want the cached 1", n)
	}

	// Concurrent scrapes after the TTL: one query for all of them.
	mu.Lock()
	now = now.Add(QueueCountTTL)
	mu.Unlock()
	before := pool.Stat().AcquireCount()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = reg.Gather() }()
	}
	wg.Wait()
	if n := pool.Stat().AcquireCount() - before; n != 1 {
		t.Errorf("8 concurrent scrapes acquired %d connections, want 1 (one query)", n)
	}
	if n := available(); n != 2 {
		t.Errorf("available %v after the TTL, want 2", n)
	}
}
