package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
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
// within LimitsTTL (at once on the replica that made it). Concurrent misses of one tenant share
// one read, and while the database cannot be read the last limits read are served for up to
// StaleLimitsFor. The request limiter remembers each refusal until the time the database gave
// for the next allowed request, so a refused tenant's further requests cost no statement.
type Quotas struct {
	pool     *pgxpool.Pool
	defaults tenant.Limits
	ttl      time.Duration
	now      func() time.Time

	mu    sync.RWMutex
	cache map[uuid.UUID]cachedLimits
	loads map[uuid.UUID]*limitsLoad // reads in flight, shared by concurrent misses
	epoch uint64                    // bumped by LimitsSet: a read begun before it is not cached

	refusedMu sync.Mutex
	refused   map[uuid.UUID]refusal
}

type cachedLimits struct {
	limits tenant.Limits
	read   time.Time // when they were read
}

// limitsLoad is one read of a tenant's limits that concurrent misses wait for.
type limitsLoad struct {
	done   chan struct{}
	limits tenant.Limits
	err    error
}

// refusal is a refused request's answer, remembered by the process: until is the earliest time
// (this process's clock) the database could allow the tenant's next request, full the earliest
// time its burst could be full again.
type refusal struct {
	rate        float64
	burst       int
	until, full time.Time
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

// StaleLimitsFor is how long a tenant's last limits read are served when they cannot be read
// again (the database is unavailable): requests keep their limits instead of all failing.
const StaleLimitsFor = time.Minute

// quotaTimeout bounds the limiter's, the limits' and the quota checks' statements. They are not
// cut by the request's context: pgx closes a connection whose query is cancelled, so clients
// that abort requests would cost the pool a connection, and PostgreSQL a new backend, every time.
const quotaTimeout = 3 * time.Second

// maxCachedLimits is how many tenants' limits (and refusals) the process holds before it drops
// the expired ones.
const maxCachedLimits = 10_000

// NewQuotas returns the quotas over pool; the caller keeps ownership of pool.
func NewQuotas(pool *pgxpool.Pool, cfg QuotasConfig) *Quotas {
	if cfg.LimitsTTL <= 0 {
		cfg.LimitsTTL = DefaultLimitsTTL
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Quotas{pool: pool, defaults: cfg.Defaults, ttl: cfg.LimitsTTL, now: cfg.Clock,
		cache: map[uuid.UUID]cachedLimits{}, loads: map[uuid.UUID]*limitsLoad{}, refused: map[uuid.UUID]refusal{}}
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
// tenant. This replica sees the new limits at once (and forgets the tenant's refusals), the
// others within LimitsTTL.
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
	delete(q.loads, tenantID)
	q.epoch++
	q.mu.Unlock()
	q.refusedMu.Lock()
	delete(q.refused, tenantID)
	q.refusedMu.Unlock()
	return nil
}

// Effective returns the tenant's resolved limits (its own over the server's defaults), from the
// cache when they were read less than LimitsTTL ago. When they cannot be read (the database is
// unavailable, the read timed out), limits read less than StaleLimitsFor ago are served.
func (q *Quotas) Effective(ctx context.Context, tenantID uuid.UUID) (tenant.Limits, error) {
	now := time.Now()
	q.mu.RLock()
	c, ok := q.cache[tenantID]
	q.mu.RUnlock()
	if ok && now.Sub(c.read) < q.ttl {
		return c.limits, nil
	}
	l, err := q.load(ctx, tenantID)
	switch {
	case err == nil:
		return l, nil
	case ok && fault.Code(err) == fault.Unavailable && time.Since(c.read) < StaleLimitsFor:
		return c.limits, nil
	}
	return tenant.Limits{}, err
}

// load reads the tenant's limits into the cache; concurrent callers share one read. The read is
// not cut by ctx (a caller that gives up does not cancel the others' read), only bounded; ctx
// bounds the caller's wait.
func (q *Quotas) load(ctx context.Context, tenantID uuid.UUID) (tenant.Limits, error) {
	q.mu.Lock()
	if c, ok := q.cache[tenantID]; ok && time.Since(c.read) < q.ttl { // read while this caller waited
		q.mu.Unlock()
		return c.limits, nil
	}
	if ld, ok := q.loads[tenantID]; ok {
		q.mu.Unlock()
		select {
		case <-ld.done:
			return ld.limits, ld.err
		case <-ctx.Done():
			return tenant.Limits{}, ctx.Err()
		}
	}
	ld := &limitsLoad{done: make(chan struct{})}
	q.loads[tenantID] = ld
	epoch := q.epoch
	q.mu.Unlock()

	read := time.Now()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), quotaTimeout)
	l, err := q.LimitsGet(rctx, tenantID)
	cancel()
	if err == nil {
		l = l.Resolve(q.defaults)
	}
	ld.limits, ld.err = l, err

	q.mu.Lock()
	if q.loads[tenantID] == ld {
		delete(q.loads, tenantID)
	}
	if err == nil && epoch == q.epoch {
		if len(q.cache) >= maxCachedLimits {
			for id, c := range q.cache {
				if read.Sub(c.read) >= StaleLimitsFor {
					delete(q.cache, id)
				}
			}
		}
		q.cache[tenantID] = cachedLimits{limits: l, read: read}
	}
	q.mu.Unlock()
	close(ld.done)
	return l, err
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
// max(tat, now) + T. now is the database's clock, read once before the row is locked: a request
// that waited for the lock is judged a little early, which can only refuse it sooner.
//
// A refused request writes nothing and takes no lock: the statement reads the row first (seen,
// without a lock) and tries the upsert only when that read allows the request; tat only moves
// forward, so a refusal by the read is a refusal by the row. The upsert decides again under the
// row's lock (DO UPDATE … WHERE allowed), so concurrent requests on every replica are decided one
// after the other; one refused there (another request took the last token in between) updates
// nothing. It answers now, tat after an allowed request (null: refused), and the tat read.
const rateTakeSQL = `
WITH n AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now),
seen AS (SELECT tat_us FROM tenant_rates WHERE tenant_id = $1),
took AS (
	INSERT INTO tenant_rates AS r (tenant_id, tat_us, at_us, allowed)
	SELECT $1, n.now + $2, n.now, true FROM n
	WHERE NOT EXISTS (SELECT FROM seen WHERE greatest(seen.tat_us, n.now) + $2 - n.now > $3)
	ON CONFLICT (tenant_id) DO UPDATE SET tat_us = greatest(r.tat_us, excluded.at_us) + $2, at_us = excluded.at_us
		WHERE greatest(r.tat_us, excluded.at_us) + $2 - excluded.at_us <= $3
	RETURNING r.tat_us)
SELECT n.now, (SELECT tat_us FROM took), (SELECT tat_us FROM seen) FROM n`

// RateTake decides one request of the tenant under a rate of perSecond requests a second with
// burst, on all replicas together, and records it when allowed.
//
// A refusal is remembered by the process until the time the database gave for the next allowed
// request, measured from before the statement was sent (so never later than the database's):
// until then the tenant's requests are refused without a statement. That can only refuse a
// request the database would refuse too (tat never moves back), so together the replicas allow
// no more than the database alone would; what it saves is the statement of every refusal but
// the first of each wait, on each replica. The statement is not cut by ctx (see quotaTimeout).
func (q *Quotas) RateTake(ctx context.Context, tenantID uuid.UUID, perSecond float64, burst int) (RateDecision, error) {
	burst = max(burst, 1)
	start := time.Now()
	if d, ok := q.cachedRefusal(tenantID, perSecond, burst, start); ok {
		return d, nil
	}
	t := max(int64(math.Round(1e6/perSecond)), 1)
	tol := t * int64(burst)
	var (
		now       int64
		took, tat *int64
	)
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), quotaTimeout)
	defer cancel()
	if err := q.pool.QueryRow(qctx, rateTakeSQL, tenantID, t, tol).Scan(&now, &took, &tat); err != nil {
		return RateDecision{}, translate(err, "rate limit")
	}
	d := RateDecision{Allowed: took != nil, Limit: burst}
	var cur int64 // the tenant's tat after this decision
	switch {
	case d.Allowed:
		cur = *took
	case tat != nil && max(*tat, now)+t-now > tol:
		cur = *tat // refused by the row as read
	default:
		// Refused under the lock: another request took the last token after the read. The tat
		// that refuses is at least the smallest one that does.
		cur = now + tol - t + 1
	}
	ahead := max(cur-now, 0) // µs of requests queued ahead of now
	d.Remaining = int(max((tol-ahead)/t, 0))
	d.Reset = time.Duration(ahead) * time.Microsecond
	if !d.Allowed {
		d.RetryAfter = time.Duration(max(ahead-tol+t, 1)) * time.Microsecond
		q.remember(tenantID, refusal{rate: perSecond, burst: burst, until: start.Add(d.RetryAfter), full: start.Add(d.Reset)})
	}
	return d, nil
}

// cachedRefusal answers a request of the tenant that a remembered refusal (of the same rate and
// burst) still refuses.
func (q *Quotas) cachedRefusal(tenantID uuid.UUID, perSecond float64, burst int, now time.Time) (RateDecision, bool) {
	q.refusedMu.Lock()
	r, ok := q.refused[tenantID]
	q.refusedMu.Unlock()
	if !ok || r.rate != perSecond || r.burst != burst || !now.Before(r.until) {
		return RateDecision{}, false
	}
	return RateDecision{Limit: burst, Reset: r.full.Sub(now), RetryAfter: r.until.Sub(now)}, true
}

// remember keeps a refusal of the tenant until its wait is over.
func (q *Quotas) remember(tenantID uuid.UUID, r refusal) {
	q.refusedMu.Lock()
	defer q.refusedMu.Unlock()
	if len(q.refused) >= maxCachedLimits {
		now := time.Now()
		for id, old := range q.refused {
			if !now.Before(old.until) {
				delete(q.refused, id)
			}
		}
	}
	q.refused[tenantID] = r
}

// Sub-queries of what a tenant's quotas count now: its live sessions, their stored log bytes
// ($1 the tenant), and the tokens of its turns of a UTC day ($2).
const (
	liveSessionsSQL = `(SELECT count(*) FROM sessions WHERE tenant_id = $1 AND deleted_at IS NULL)`
	liveBytesSQL    = `(SELECT coalesce(sum(c.log_bytes), 0)::bigint FROM sessions s JOIN session_counters c ON c.session_id = s.id
		WHERE s.tenant_id = $1 AND s.deleted_at IS NULL)`
	tokensOfDaySQL = `(SELECT coalesce(sum(input_tokens + output_tokens), 0)::bigint FROM usage_turns WHERE tenant_id = $1 AND day = $2::date)`
)

// Standing is what a tenant's quotas count now.
type Standing struct {
	Sessions    int64 // live sessions
	LogBytes    int64 // stored bytes of their logs
	TokensToday int64 // tokens of the turns that started today (UTC)
}

// Standing reads what the tenant's quotas count now (one statement).
func (q *Quotas) Standing(ctx context.Context, tenantID uuid.UUID) (Standing, error) {
	return q.standing(ctx, tenantID, true, true, true)
}

// standing reads the parts of the tenant's standing asked for (one statement); the others are 0.
func (q *Quotas) standing(ctx context.Context, tenantID uuid.UUID, sessions, bytes, tokens bool) (Standing, error) {
	var s Standing
	cols := []string{"0::bigint", "0::bigint", "0::bigint"}
	args := []any{tenantID}
	if sessions {
		cols[0] = liveSessionsSQL
	}
	if bytes {
		cols[1] = liveBytesSQL
	}
	if tokens {
		cols[2] = tokensOfDaySQL
		args = append(args, q.now().UTC().Format(time.DateOnly))
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), quotaTimeout) // see quotaTimeout
	defer cancel()
	err := q.pool.QueryRow(qctx, "SELECT "+strings.Join(cols, ", "), args...).Scan(&s.Sessions, &s.LogBytes, &s.TokensToday)
	return s, translate(err, "read quota standing")
}

// ForkBounds returns the tenant's quotas that bound a fork in its transaction (Store.ForkWithin);
// none for a nil Quotas.
func (q *Quotas) ForkBounds(ctx context.Context, tenantID uuid.UUID) (ForkBounds, error) {
	if q == nil {
		return ForkBounds{}, nil
	}
	l, err := q.Effective(ctx, tenantID)
	return ForkBounds{MaxSessions: l.MaxSessions, MaxLogBytes: l.MaxLogBytes}, err
}

// What a quota check is for.
const (
	ForSession = iota // creating or forking a session: sessions and stored bytes
	ForPost           // posting a message: stored bytes and tokens of the day
	ForTurn           // starting a turn: tokens of the day
)

// Check refuses what the tenant's quotas no longer allow (for: ForSession, ForPost, ForTurn) with
// a quota_exceeded fault (for tokens with a fault.Wait until the next UTC day: Retry-After).
// It costs one statement, of only the counts the quotas that apply need, when one is set, none
// otherwise. The check is soft: requests that pass it together may exceed a quota by what they
// add between them (a fork is checked again in its transaction: Store.ForkWithin).
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
	s, err := q.standing(ctx, tenantID, sessions, bytes, tokens)
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
