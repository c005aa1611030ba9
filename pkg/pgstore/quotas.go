package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/tenant"
)

// Quotas enforces tenants' quotas and rate limits (tenant.Limits, docs/usage-and-quotas.md) on
// every replica together: the limits are the operator's (tenants.limits, null fields taking the
// server's defaults), the state is in PostgreSQL (the request limiter's tenant_rates row, the
// usage tables the append statement keeps). It is safe for concurrent use.
//
// A tenant's resolved limits are cached in the process for LimitsTTL, so a tenant without a
// limit costs no statement per request, and a change by the operator holds on every replica
// within LimitsTTL (at once on the replica that made it).
type Quotas struct {
	pool     *pgxpool.Pool
	defaults tenant.Limits
	ttl      time.Duration
	now      func() time.Time

	mu    sync.Mutex
	cache map[uuid.UUID]cachedLimits
}

type cachedLimits struct {
	limits tenant.Limits
	until  time.Time
}

// QuotasConfig configures Quotas.
type QuotasConfig struct {
	// Defaults are the server's limits, for the fields a tenant's limits leave null. Default none.
	Defaults tenant.Limits
	// LimitsTTL is how long a tenant's limits are cached in the process. Default DefaultLimitsTTL.
	LimitsTTL time.Duration
	// Clock is the time of the daily token quota's day. Default time.Now.
	Clock func() time.Time
}

// DefaultLimitsTTL is QuotasConfig.LimitsTTL's default: a limit set by the operator holds on
// every replica within a second.
const DefaultLimitsTTL = time.Second

// maxCachedLimits is how many tenants' limits the cache holds before it drops the expired ones.
const maxCachedLimits = 10_000

// NewQuotas returns the quotas over pool; the caller keeps ownership of pool.
func NewQuotas(pool *pgxpool.Pool, cfg QuotasConfig) *Quotas {
	if cfg.LimitsTTL <= 0 {
		cfg.LimitsTTL = DefaultLimitsTTL
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Quotas{pool: pool, defaults: cfg.Defaults, ttl: cfg.LimitsTTL, now: cfg.Clock, cache: map[uuid.UUID]cachedLimits{}}
}

// Defaults returns the server's limits.
func (q *Quotas) Defaults() tenant.Limits { return q.defaults }

// LimitsGet returns the limits the operator set for the tenant (null fields: the server's
// defaults), read now. tenant.ErrNotFound for an unknown tenant.
func (q *Quotas) LimitsGet(ctx context.Context, tenantID uuid.UUID) (tenant.Limits, error) {
	var raw []byte
	err := q.pool.QueryRow(ctx, `SELECT limits FROM tenants WHERE id = $1`, tenantID).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return tenant.Limits{}, tenant.ErrNotFound
	}
	if err != nil {
		return tenant.Limits{}, dbError(err, "tenant: read limits")
	}
	var l tenant.Limits
	if err := json.Unmarshal(raw, &l); err != nil {
		return tenant.Limits{}, fmt.Errorf("tenant: limits of %s: %w", tenantID, err)
	}
	return l, nil
}

// LimitsSet replaces the tenant's limits with l (validated). tenant.ErrNotFound for an unknown
// tenant. This replica sees the new limits at once, the others within LimitsTTL.
func (q *Quotas) LimitsSet(ctx context.Context, tenantID uuid.UUID, l tenant.Limits) error {
	if err := l.Validate(); err != nil {
		return err
	}
	raw, err := json.Marshal(l)
	if err != nil {
		return err
	}
	tag, err := q.pool.Exec(ctx, `UPDATE tenants SET limits = $2 WHERE id = $1`, tenantID, raw)
	if err != nil {
		return dbError(err, "tenant: set limits")
	}
	if tag.RowsAffected() == 0 {
		return tenant.ErrNotFound
	}
	q.mu.Lock()
	delete(q.cache, tenantID)
	q.mu.Unlock()
	return nil
}

// Effective returns the tenant's resolved limits (its own over the server's defaults), from the
// cache when it is younger than LimitsTTL.
func (q *Quotas) Effective(ctx context.Context, tenantID uuid.UUID) (tenant.Limits, error) {
	now := time.Now()
	q.mu.Lock()
	c, ok := q.cache[tenantID]
	q.mu.Unlock()
	if ok && now.Before(c.until) {
		return c.limits, nil
	}
	l, err := q.LimitsGet(ctx, tenantID)
	if err != nil {
		return tenant.Limits{}, err
	}
	l = l.Resolve(q.defaults)
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.cache) >= maxCachedLimits {
		for id, c := range q.cache {
			if !now.Before(c.until) {
				delete(q.cache, id)
			}
		}
	}
	q.cache[tenantID] = cachedLimits{limits: l, until: now.Add(q.ttl)}
	return l, nil
}

// MaxTurns returns how many turns the tenant may run at once: its maxConcurrentTurns, else def
// (the server's). A failed read of the limits keeps def.
func (q *Quotas) MaxTurns(ctx context.Context, tenantID uuid.UUID, def int) int {
	if q == nil {
		return def
	}
	l, err := q.Effective(ctx, tenantID)
	if err != nil || l.MaxConcurrentTurns == nil {
		return def
	}
	return *l.MaxConcurrentTurns
}

// RateDecision is the shared limiter's answer to one request.
type RateDecision struct {
	Allowed bool
	// Limit is the burst: how many requests may be made at once after a pause.
	Limit int
	// Remaining is how many more requests would be allowed right now.
	Remaining int
	// Reset is the time until the limiter is back to its full burst.
	Reset time.Duration
	// RetryAfter is, for a refused request, the time until one is allowed again.
	RetryAfter time.Duration
}

// rateTakeSQL is the request limiter (GCRA, the generic cell rate algorithm): one row per tenant
// holds the theoretical arrival time tat; a request at now is allowed when max(tat, now) + T - now
// <= B·T (T the emission interval 1/rate in µs, $2; B·T the tolerance, $3), and then moves tat to
// max(tat, now) + T; a refused request changes nothing but the recorded decision. The upsert
// decides and records under the row's lock, so concurrent requests on every replica are
// decided one after the other. now is the database's clock, read once before the row is locked:
// a request that waited for the lock is judged a little early, which can only refuse it sooner.
const rateTakeSQL = `
INSERT INTO tenant_rates AS r (tenant_id, tat_us, at_us, allowed)
SELECT $1, n.now + $2, n.now, true
FROM (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now) n
ON CONFLICT (tenant_id) DO UPDATE SET
	allowed = greatest(r.tat_us, excluded.at_us) + $2 - excluded.at_us <= $3,
	tat_us = CASE WHEN greatest(r.tat_us, excluded.at_us) + $2 - excluded.at_us <= $3
		THEN greatest(r.tat_us, excluded.at_us) + $2 ELSE r.tat_us END,
	at_us = excluded.at_us
RETURNING allowed, tat_us, at_us`

// RateTake decides one request of the tenant under a rate of perSecond requests a second with
// burst, on all replicas together, and records it when allowed.
func (q *Quotas) RateTake(ctx context.Context, tenantID uuid.UUID, perSecond float64, burst int) (RateDecision, error) {
	t := max(int64(math.Round(1e6/perSecond)), 1)
	tol := t * int64(max(burst, 1))
	var (
		d       RateDecision
		tat, at int64
	)
	if err := q.pool.QueryRow(ctx, rateTakeSQL, tenantID, t, tol).Scan(&d.Allowed, &tat, &at); err != nil {
		return RateDecision{}, translate(err, "rate limit")
	}
	ahead := max(tat-at, 0) // µs of requests queued ahead of now
	d.Limit = max(burst, 1)
	d.Remaining = int(max((tol-ahead)/t, 0))
	d.Reset = time.Duration(ahead) * time.Microsecond
	if !d.Allowed {
		d.RetryAfter = time.Duration(max(ahead-tol+t, 1)) * time.Microsecond
	}
	return d, nil
}

// usageNowSQL reads what the tenant's quotas count now: its live sessions, their stored log
// bytes, and the tokens of its turns of today's UTC day.
const usageNowSQL = `
SELECT (SELECT count(*) FROM sessions WHERE tenant_id = $1 AND deleted_at IS NULL),
	(SELECT coalesce(sum(c.log_bytes), 0)::bigint FROM sessions s JOIN session_counters c ON c.session_id = s.id
		WHERE s.tenant_id = $1 AND s.deleted_at IS NULL),
	(SELECT coalesce(sum(input_tokens + output_tokens), 0)::bigint FROM usage_turns WHERE tenant_id = $1 AND day = $2::date)`

// Standing is what a tenant's quotas count now.
type Standing struct {
	Sessions    int64 // live sessions
	LogBytes    int64 // stored bytes of their logs
	TokensToday int64 // tokens of the turns that started today (UTC)
}

// Standing reads what the tenant's quotas count now (one statement).
func (q *Quotas) Standing(ctx context.Context, tenantID uuid.UUID) (Standing, error) {
	var s Standing
	day := q.now().UTC().Format(time.DateOnly)
	err := q.pool.QueryRow(ctx, usageNowSQL, tenantID, day).Scan(&s.Sessions, &s.LogBytes, &s.TokensToday)
	return s, translate(err, "read quota standing")
}

// What a quota check is for.
const (
	ForSession = iota // creating or forking a session: sessions and stored bytes
	ForPost           // posting a message: stored bytes and tokens of the day
	ForTurn           // starting a turn: tokens of the day
)

// Check refuses what the tenant's quotas no longer allow (for: ForSession, ForPost, ForTurn) with
// a quota_exceeded fault (for tokens with a fault.Wait until the next UTC day: Retry-After).
// It costs one statement when a quota that applies is set, none otherwise. The check is soft:
// requests that pass it together may exceed a quota by what they add between them.
func (q *Quotas) Check(ctx context.Context, tenantID uuid.UUID, what int) error {
	if q == nil {
		return nil
	}
	l, err := q.Effective(ctx, tenantID)
	if err != nil {
		return err
	}
	sessions := what == ForSession && l.MaxSessions != nil
	bytes := what != ForTurn && l.MaxLogBytes != nil
	tokens := what != ForSession && l.TokensPerDay != nil
	if !sessions && !bytes && !tokens {
		return nil
	}
	s, err := q.Standing(ctx, tenantID)
	if err != nil {
		return err
	}
	switch {
	case sessions && s.Sessions >= *l.MaxSessions:
		return fault.New(fault.QuotaExceeded, "the tenant has %d live sessions, its quota is %d: delete one first", s.Sessions, *l.MaxSessions)
	case bytes && s.LogBytes >= *l.MaxLogBytes:
		return fault.New(fault.QuotaExceeded, "the logs of the tenant's live sessions hold %d bytes, its quota is %d: delete sessions first", s.LogBytes, *l.MaxLogBytes)
	case tokens && s.TokensToday >= *l.TokensPerDay:
		return tenant.TokensExceeded(s.TokensToday, *l.TokensPerDay, q.now())
	}
	return nil
}
