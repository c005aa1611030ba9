package worker

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/time/rate"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/tenant"
)

// Rate is a token bucket (golang.org/x/time/rate): PerSecond tokens are added a second, at most Burst kept; every post
// takes one. The zero value means the setting's default; PerSecond < 0 means no limit.
type Rate struct {
	PerSecond float64
	Burst     int
}

// Defaults of Config.SessionPosts and Config.TenantPosts.
var (
	DefaultSessionPosts = Rate{PerSecond: 10, Burst: 20}
	DefaultTenantPosts  = Rate{PerSecond: 200, Burst: 400}
)

func (r Rate) orDefault(def Rate) Rate {
	if r.PerSecond == 0 {
		return def
	}
	if r.Burst < 1 {
		r.Burst = max(1, int(math.Ceil(r.PerSecond)))
	}
	return r
}

func (r Rate) unlimited() bool { return r.PerSecond < 0 }

// rateLimited returns the error of a post refused by the bucket of what, retryable after wait.
func rateLimited(what string, wait time.Duration) error {
	return &fault.Error{Code: fault.RateLimited, Err: fault.Wait(wait),
		Message: fmt.Sprintf("too many messages posted to this %s; retry after %v", what, wait.Round(time.Millisecond))}
}

// postLimiter holds the token buckets of sessions and tenants (on this replica).
type postLimiter struct {
	mu              sync.Mutex
	session, tenant buckets
}

// buckets are the token buckets of one rate (golang.org/x/time/rate limiters), by tenant and
// session (uuid.Nil for a tenant's own bucket). A session's bucket is keyed by its tenant too: a
// post that names another tenant's session id is refused (404) after the limiter, and must not
// drain that session's bucket.
type buckets struct {
	rate Rate
	m    map[bucketKey]*rate.Limiter
}

type bucketKey struct{ tenant, session uuid.UUID }

func newPostLimiter(session, tenant Rate) *postLimiter {
	return &postLimiter{session: buckets{rate: session, m: map[bucketKey]*rate.Limiter{}},
		tenant: buckets{rate: tenant, m: map[bucketKey]*rate.Limiter{}}}
}

// take takes a token from id's bucket at now (a new bucket is full): ok, or the wait until it
// holds one, having taken nothing. undo gives a taken token back. Without a limit it takes nothing.
func (bs *buckets) take(id bucketKey, now time.Time) (wait time.Duration, undo func()) {
	if bs.rate.unlimited() {
		return 0, func() {}
	}
	l := bs.m[id]
	if l == nil {
		l = rate.NewLimiter(rate.Limit(bs.rate.PerSecond), bs.rate.Burst)
		bs.m[id] = l
	}
	r := l.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d, nil
	}
	return 0, func() { r.CancelAt(now) }
}

// prune forgets the buckets that have filled up again (a new bucket is full too).
func (bs *buckets) prune(now time.Time) {
	for id, l := range bs.m {
		if l.TokensAt(now) >= float64(bs.rate.Burst) {
			delete(bs.m, id)
		}
	}
}

// maxBuckets is how many buckets of a rate allow keeps before it prunes the full ones at once
// (the sweeper prunes them regularly).
const maxBuckets = 100_000

// allow takes a token from both the session's and the tenant's bucket, or from neither: then it
// returns the error saying which is empty and when it will hold a token again.
func (l *postLimiter) allow(tenantID, sessionID uuid.UUID, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	wait, undo := l.session.take(bucketKey{tenantID, sessionID}, now)
	if wait > 0 {
		return rateLimited("session", wait)
	}
	if wait, _ := l.tenant.take(bucketKey{tenant: tenantID}, now); wait > 0 {
		undo()
		return rateLimited("tenant", wait)
	}
	for _, bs := range []*buckets{&l.session, &l.tenant} {
		if len(bs.m) > maxBuckets {
			bs.prune(now)
		}
	}
	return nil
}

// prune forgets the buckets that have filled up again.
func (l *postLimiter) prune(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.session.prune(now)
	l.tenant.prune(now)
}

// admitTurn is the agent loop's Admit of the tenant's turns: a turn whose tenant spent its tokens
// of the day (pgstore.Quotas.Check) ends with TOKEN_QUOTA_EXCEEDED before its first model call.
// When the quota cannot be read (the database is unavailable) the turn runs: its model call is
// counted all the same, and the next turn's check sees it.
func (s *Service) admitTurn(tenantID uuid.UUID) func(context.Context) *eventlog.TurnError {
	return func(ctx context.Context) *eventlog.TurnError {
		err := s.cfg.Quotas.Check(ctx, tenantID, pgstore.ForTurn)
		switch {
		case err == nil:
			return nil
		case fault.Code(err) == fault.QuotaExceeded: // for a turn, only the token quota applies
			return &eventlog.TurnError{Code: tenant.CodeTokenQuotaExceeded, Message: fault.Message(err)}
		case ctx.Err() != nil:
			return nil // the turn is being cancelled: it ends aborted
		}
		s.cfg.Logger.Warn("the token quota could not be checked; the turn runs", "tenant", tenantID, "err", err)
		return nil
	}
}
