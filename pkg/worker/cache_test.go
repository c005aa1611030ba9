package worker

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/pgstore"
)

func TestRunnerCacheTakesOnceAndDropsTheLeastRecent(t *testing.T) {
	t.Parallel()
	c := newRunnerCache(2, 1<<30)
	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	released := map[uuid.UUID]int{}
	for _, id := range ids {
		c.put(id, &agentloop.Runner{}, (&pgstore.Store{}).Journal(nil, uuid.Nil, id, uuid.Nil), func() { released[id]++ })
	}
	if _, _, _, ok := c.take(ids[0]); ok {
		t.Fatal("the least recently kept runner was not dropped")
	}
	if released[ids[0]] != 1 || released[ids[1]] != 0 || released[ids[2]] != 0 {
		t.Fatalf("released %v: want only the dropped runner's configuration released", released)
	}
	_, j, release, ok := c.take(ids[2])
	if !ok || j.Session() != ids[2] {
		t.Fatal("the newest runner is missing")
	}
	if _, _, _, ok := c.take(ids[2]); ok {
		t.Fatal("a runner was taken twice: two serves could share it")
	}
	// A runner put back in place of another of its session releases the one it replaces.
	c.put(ids[1], &agentloop.Runner{}, (&pgstore.Store{}).Journal(nil, uuid.Nil, ids[1], uuid.Nil), func() { released[ids[1]] += 10 })
	if released[ids[1]] != 1 || released[ids[2]] != 0 {
		t.Fatalf("released %v", released)
	}
	release()
	if released[ids[2]] != 1 {
		t.Fatalf("released %v", released)
	}
}

func TestSnoozeJitterSpreadsAroundItsMean(t *testing.T) {
	t.Parallel()
	seen := map[time.Duration]bool{}
	for range 100 {
		d := jitter(tenantSnooze)
		if d < tenantSnooze/2 || d >= tenantSnooze*3/2 {
			t.Fatalf("jitter(%v) = %v", tenantSnooze, d)
		}
		seen[d] = true
	}
	if len(seen) < 50 {
		t.Fatalf("%d distinct snoozes of 100: not spread", len(seen))
	}
}
