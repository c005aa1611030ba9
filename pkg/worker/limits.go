package worker

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/tenant"
)

// Rate is a token bucket: PerSecond tokens are added a second, at most Burst kept; every post
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

// buckets are the token buckets of one rate, by tenant and session (uuid.Nil for a tenant's own
// bucket). A session's bucket is keyed by its tenant too: a post that names another tenant's
// session id is refused (404) after the limiter, and must not drain that session's bucket.
type buckets struct {
	rate Rate
	m    map[bucketKey]*bucket
}

type bucketKey struct{ tenant, session uuid.UUID }

type bucket struct {
	tokens float64
	at     time.Time
}

func newPostLimiter(session, tenant Rate) *postLimiter {
	return &postLimiter{session: buckets{rate: session, m: map[bucketKey]*bucket{}},
		tenant: buckets{rate: tenant, m: map[bucketKey]*bucket{}}}
}

// fill returns id's bucket refilled at now (a new one is full), nil without a limit.
func (bs *buckets) fill(id bucketKey, now time.Time) *bucket {
	if bs.rate.unlimited() {
		return nil
	}
	b := bs.m[id]
	if b == nil {
		b = &bucket{tokens: float64(bs.rate.Burst), at: now}
		bs.m[id] = b
	}
	b.tokens = min(float64(bs.rate.Burst), b.tokens+now.Sub(b.at).Seconds()*bs.rate.PerSecond)
	b.at = now
	return b
}

// wait is how long until b holds a token again.
func (bs *buckets) wait(b *bucket) time.Duration {
	return time.Duration(math.Ceil((1 - b.tokens) / bs.rate.PerSecond * float64(time.Second)))
}

// prune forgets the buckets that have filled up again (a new bucket is full too), all of them
// when there are more than maxBuckets.
func (bs *buckets) prune(now time.Time) {
	for id, b := range bs.m {
		if b.tokens+now.Sub(b.at).Seconds()*bs.rate.PerSecond >= float64(bs.rate.Burst) {
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
	s, t := l.session.fill(bucketKey{tenantID, sessionID}, now), l.tenant.fill(bucketKey{tenant: tenantID}, now)
	if s != nil && s.tokens < 1 {
		return rateLimited("session", l.session.wait(s))
	}
	if t != nil && t.tokens < 1 {
		return rateLimited("tenant", l.tenant.wait(t))
	}
	for _, b := range []*bucket{s, t} {
		if b != nil {
			b.tokens--
		}
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
