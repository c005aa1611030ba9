package eventlog_test

import (
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/eventlog/eventlogtest"
)

// memHarness runs the Journal conformance suite over MemJournal.
type memHarness struct{}

func (memHarness) NewSession(*testing.T) eventlogtest.Session {
	return memSession{eventlog.NewMemJournal(nil)}
}

type memSession struct{ j *eventlog.MemJournal }

func (s memSession) Journal(owner string) eventlog.Journal {
	if owner == "" {
		return s.j
	}
	return s.j.Writer(owner)
}

func (s memSession) Acquire(owner string, ttl time.Duration) bool {
	return s.j.LeaseAcquire(owner, ttl)
}
func (s memSession) Release(owner string) { s.j.LeaseRelease(owner) }

func TestMemJournalConformance(t *testing.T) {
	t.Parallel()
	eventlogtest.Run(t, memHarness{})
}
