package worker

import "github.com/google/uuid"

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
