package pgstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/eventlog/eventlogtest"
	"github.com/dshd/dshd/pkg/pgstore"
)

// pgHarness runs the Journal conformance suite over the store: every session lives in a fresh
// database, with a started Hub serving Wait and Latest unless noHub.
type pgHarness struct{ noHub bool }

func (h pgHarness) NewSession(t *testing.T) eventlogtest.Session {
	st, pool, tenant := newStore(t, pgstore.StoreConfig{})
	s := &pgSession{t: t, st: st, tenant: tenant, id: newSession(t, st, tenant).ID, owners: map[string]uuid.UUID{}}
	if !h.noHub {
		s.hub = pgstore.NewHub(pool, pgstore.HubConfig{})
		if err := s.hub.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.hub.Stop)
	}
	return s
}

type pgSession struct {
	t      *testing.T
	st     *pgstore.Store
	hub    *pgstore.Hub
	tenant uuid.UUID
	id     uuid.UUID

	mu     sync.Mutex
	owners map[string]uuid.UUID
}

// owner maps an owner name of the suite to a lease owner id ("" is uuid.Nil: unfenced).
func (s *pgSession) owner(name string) uuid.UUID {
	if name == "" {
		return uuid.Nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.owners[name]
	if !ok {
		id = uuid.New()
		s.owners[name] = id
	}
	return id
}

func (s *pgSession) Journal(owner string) eventlog.Journal {
	j := s.st.Journal(s.hub, s.tenant, s.id, s.owner(owner))
	j.Open() // as a runner does: Latest follows other writers' commits
	s.t.Cleanup(j.Close)
	return j
}

func (s *pgSession) Acquire(owner string, ttl time.Duration) bool {
	ok, _, err := s.st.LeaseAcquire(context.Background(), s.tenant, s.id, s.owner(owner), ttl)
	if err != nil {
		s.t.Errorf("acquire: %v", err)
	}
	return ok
}

func (s *pgSession) Release(owner string) {
	if _, err := s.st.LeaseRelease(context.Background(), s.tenant, s.id, s.owner(owner)); err != nil {
		s.t.Errorf("release: %v", err)
	}
}

func (s *pgSession) Delete() {
	if err := s.st.SessionDelete(context.Background(), s.tenant, s.id); err != nil {
		s.t.Errorf("delete: %v", err)
	}
}

func TestJournalConformance(t *testing.T) {
	t.Parallel()
	t.Run("hub", func(t *testing.T) { t.Parallel(); eventlogtest.Run(t, pgHarness{}) })
	t.Run("nohub", func(t *testing.T) { t.Parallel(); eventlogtest.Run(t, pgHarness{noHub: true}) })
}
