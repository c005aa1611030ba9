package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"
)

// ErrSessionBusy is a Hold refused because a turn of the session holds its run lease.
var ErrSessionBusy = errors.New("worker: a turn of the session holds its run lease")

// Hold takes the session's run lease with a fresh owner, for work on the session that must not
// overlap one of its turns (a fork's copy of its workspace): no turn starts while it is held, on
// any replica. ErrSessionBusy while another holder's lease is live; eventlog.ErrNotFound for an
// unknown, other tenant's or deleted session. The lease is renewed every third of
// Config.LeaseTTL until release, which the caller must call once: it gives the lease up and,
// when a message was posted meanwhile, enqueues the session's wake (Queue.LeaseDrop), so the
// message is served. Safe for concurrent use.
func (s *Service) Hold(ctx context.Context, tenantID, sessionID uuid.UUID) (release func(), err error) {
	owner, ttl := uuid.New(), s.cfg.LeaseTTL
	ok, _, err := s.cfg.Store.LeaseAcquire(ctx, tenantID, sessionID, owner, ttl)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrSessionBusy
	}
	stop, renewed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(renewed)
		tick := time.NewTicker(ttl / 3)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_ = s.cfg.Store.LeaseRenew(context.WithoutCancel(ctx), tenantID, sessionID, owner, ttl)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			<-renewed
			if err := s.queue.LeaseDrop(context.WithoutCancel(ctx), s.cfg.Store, tenantID, sessionID, owner); err != nil {
				s.cfg.Logger.Warn("a held run lease could not be dropped: it expires", "session", sessionID, "error", err)
			}
		})
	}, nil
}
