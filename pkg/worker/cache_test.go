package worker

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/agentloop"
)

func TestRunnerCacheTakesOnceAndDropsTheLeastRecent(t *testing.T) {
	t.Parallel()
	c := newRunnerCache(2)
	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	for _, id := range ids {
		c.put(id, &agentloop.Runner{}, &agentloop.StoreJournal{Session: id})
	}
	if _, _, ok := c.take(ids[0]); ok {
		t.Fatal("the least recently kept runner was not dropped")
	}
	if _, j, ok := c.take(ids[2]); !ok || j.Session != ids[2] {
		t.Fatal("the newest runner is missing")
	}
	if _, _, ok := c.take(ids[2]); ok {
		t.Fatal("a runner was taken twice: two serves could share it")
	}
}

func TestSnoozeIsBriefButNeverPastExpiry(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ left, want time.Duration }{
		{-time.Second, minSnooze}, {0, minSnooze}, {100 * time.Millisecond, 150 * time.Millisecond},
		{10 * time.Second, maxSnooze},
	} {
		if got := snoozeFor(c.left); got != c.want {
			t.Errorf("snoozeFor(%v) = %v, want %v", c.left, got, c.want)
		}
	}
}
