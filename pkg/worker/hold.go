package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
)

// ErrSessionBusy is a Hold refused because the session's run lease is recorded for another
// owner: a turn runs, another hold is under way, or the lease of a crashed turn has expired and
// waits for its repair.
var ErrSessionBusy = errors.New("worker: a turn of the session holds its run lease")

// Held is a run lease taken by Hold. Its methods are safe for concurrent use.
type Held struct {
	s                   *Service
	ctx                 context.Context
	tenantID, sessionID uuid.UUID
	owner               uuid.UUID
	ttl                 time.Duration

	stop, renewed chan struct{}
	mu            sync.Mutex
	lost          bool
	once          sync.Once
}

// Hold takes the session's run lease with a fresh owner, for work on the session that must not
// overlap one of its turns (a fork's copy of its workspace): no turn starts while it is held, on
// any replica. ErrSessionBusy while the lease is recorded for another owner, live or expired (an
// expired lease is a crashed turn's: the sweeper repairs it first, LeasesExpired); eventlog.
// ErrNotFound for an unknown, other tenant's or deleted session. The lease is renewed every
// third of Config.LeaseTTL until Release, which the caller must call once; a renewal that finds
// the lease lost marks it lost (Confirm).
func (s *Service) Hold(ctx context.Context, tenantID, sessionID uuid.UUID) (*Held, error) {
	owner, ttl := uuid.New(), s.cfg.LeaseTTL
	ok, err := s.cfg.Store.LeaseHold(ctx, tenantID, sessionID, owner, ttl)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrSessionBusy
	}
	h := &Held{s: s, ctx: context.WithoutCancel(ctx), tenantID: tenantID, sessionID: sessionID, owner: owner, ttl: ttl,
		stop: make(chan struct{}), renewed: make(chan struct{})}
	go h.renew()
	return h, nil
}

// renew renews the lease every third of its TTL until Release or until a renewal finds it lost.
// A renewal that fails otherwise (the database unreachable) is tried again at the next tick;
// Confirm tells whether the lease survived.
func (h *Held) renew() {
	defer close(h.renewed)
	tick := time.NewTicker(h.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-tick.C:
			if err := h.s.cfg.Store.LeaseRenew(h.ctx, h.tenantID, h.sessionID, h.owner, h.ttl); errors.Is(err, eventlog.ErrLeaseLost) {
				h.mu.Lock()
				h.lost = true
				h.mu.Unlock()
				return
			}
		}
	}
}

// Confirm reports whether the lease has been the holder's all along since Hold: nil when it still
// is (checked by a renewal now: a turn can only start by recording another owner, so an owner
// still recorded means no turn started meanwhile), eventlog.ErrLeaseLost when it was lost (the
// work done under it may have overlapped a turn and must be undone).
func (h *Held) Confirm(ctx context.Context) error {
	h.mu.Lock()
	lost := h.lost
	h.mu.Unlock()
	if lost {
		return eventlog.ErrLeaseLost
	}
	if err := h.s.cfg.Store.LeaseRenew(ctx, h.tenantID, h.sessionID, h.owner, h.ttl); err != nil {
		if errors.Is(err, eventlog.ErrLeaseLost) {
			h.mu.Lock()
			h.lost = true
			h.mu.Unlock()
		}
		return err
	}
	return nil
}

// Release gives the lease up and, when a message was posted meanwhile, enqueues the session's
// wake (Queue.LeaseDrop), so the message is served. Later calls do nothing.
func (h *Held) Release() {
	h.once.Do(func() {
		close(h.stop)
		<-h.renewed
		if err := h.s.queue.LeaseDrop(h.ctx, h.s.cfg.Store, h.tenantID, h.sessionID, h.owner); err != nil {
			h.s.cfg.Logger.Warn("a held run lease could not be dropped: it expires", "session", h.sessionID, "error", err)
		}
	})
}
