package worker

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/pgstore"
)

// CachedBytes is what the runner cache accounts for the runners it keeps.
func (s *Service) CachedBytes() (runners, bytes int) {
	c := s.turns.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items), c.bytes
}

// DropCachedRunner drops the session's runner from the cache.
func (s *Service) DropCachedRunner(id uuid.UUID) {
	if _, _, release, ok := s.turns.cache.take(id); ok && release != nil {
		release()
	}
}

// RunDeadline runs a parked turn's deadline job as River would.
func (s *Service) RunDeadline(ctx context.Context, d pgstore.ParkDeadline) error {
	return s.runDeadline(ctx, d)
}

// Wake enqueues the session's wake job, as a post to an idle session does.
func (s *Service) Wake(ctx context.Context, tenantID, sessionID uuid.UUID) error {
	return s.queue.WakeUnique(ctx, pgstore.Wake{TenantID: tenantID, SessionID: sessionID, Reason: "message"}, time.Second)
}
