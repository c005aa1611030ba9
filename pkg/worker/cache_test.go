package worker

import (
	"testing"

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
