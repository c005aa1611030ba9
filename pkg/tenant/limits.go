package tenant

import (
	"fmt"
	"math"
	"time"

	"github.com/dshd/dshd/pkg/fault"
)

// Limits are a tenant's quotas and rate limits, set by the operator (PUT /v1/tenants/{id}/limits,
// docs/usage-and-quotas.md). A nil field takes the server's default for it (DSHD_TENANT_*), which
// is no limit unless the operator configured one; Resolve fills them in.
type Limits struct {
	// RequestsPerSecond and Burst bound the tenant's authenticated HTTP requests on all replicas
	// together (a GCRA limiter in PostgreSQL): on average RequestsPerSecond, at most Burst at
	// once. Burst without a rate means nothing; a rate without a burst allows ceil(rate) at once.
	RequestsPerSecond *float64 `json:"requestsPerSecond"`
	Burst             *int     `json:"burst"`
	// MaxConcurrentTurns bounds the turns the tenant runs at once, on all replicas (its turn
	// slots).
	MaxConcurrentTurns *int `json:"maxConcurrentTurns"`
	// TokensPerDay bounds the input and output tokens (eventlog.Usage.Tokens) of the tenant's
	// turns that started on one UTC day: a turn that would start at or past it ends at once with
	// TOKEN_QUOTA_EXCEEDED, and a post answers 429 quota_exceeded. 0 allows no turn.
	TokensPerDay *int64 `json:"tokensPerDay"`
	// MaxSessions bounds the tenant's live (not deleted) sessions: a create or fork past it
	// answers 429 quota_exceeded.
	MaxSessions *int64 `json:"maxSessions"`
	// MaxLogBytes bounds the stored bytes of the logs of the tenant's live sessions: a post,
	// create or fork once they hold that many answers 429 quota_exceeded.
	MaxLogBytes *int64 `json:"maxLogBytes"`
}

// Bounds of the values a limit may take.
const (
	MinRequestsPerSecond = 0.001 // a request every 1000 s
	MaxRequestsPerSecond = 1_000_000
	MaxBurst             = 1_000_000
	MaxConcurrentTurns   = 100_000
	MaxQuota             = int64(1) << 53 // tokens, sessions, bytes: any real amount
)

// Validate checks every set field against its bounds; the error is an invalid_request fault.
func (l Limits) Validate() error {
	bad := func(format string, args ...any) error { return fault.New(fault.Invalid, format, args...) }
	if r := l.RequestsPerSecond; r != nil && (math.IsNaN(*r) || *r < MinRequestsPerSecond || *r > MaxRequestsPerSecond) {
		return bad("requestsPerSecond must be a number from %v to %d (null: the server's default)", MinRequestsPerSecond, MaxRequestsPerSecond)
	}
	if b := l.Burst; b != nil && (*b < 1 || *b > MaxBurst) {
		return bad("burst must be an integer from 1 to %d (null: the server's default)", MaxBurst)
	}
	if t := l.MaxConcurrentTurns; t != nil && (*t < 1 || *t > MaxConcurrentTurns) {
		return bad("maxConcurrentTurns must be an integer from 1 to %d (null: the server's default)", MaxConcurrentTurns)
	}
	for _, q := range []struct {
		name string
		v    *int64
	}{{"tokensPerDay", l.TokensPerDay}, {"maxSessions", l.MaxSessions}, {"maxLogBytes", l.MaxLogBytes}} {
		if q.v != nil && (*q.v < 0 || *q.v > MaxQuota) {
			return bad("%s must be an integer from 0 to %d (null: the server's default)", q.name, MaxQuota)
		}
	}
	return nil
}

// Resolve returns l with every nil field taken from defaults (the server's).
func (l Limits) Resolve(defaults Limits) Limits {
	pick := func(a, b *int64) *int64 {
		if a != nil {
			return a
		}
		return b
	}
	out := Limits{RequestsPerSecond: l.RequestsPerSecond, Burst: l.Burst, MaxConcurrentTurns: l.MaxConcurrentTurns,
		TokensPerDay: pick(l.TokensPerDay, defaults.TokensPerDay), MaxSessions: pick(l.MaxSessions, defaults.MaxSessions),
		MaxLogBytes: pick(l.MaxLogBytes, defaults.MaxLogBytes)}
	if out.RequestsPerSecond == nil {
		out.RequestsPerSecond = defaults.RequestsPerSecond
	}
	if out.Burst == nil {
		out.Burst = defaults.Burst
	}
	if out.MaxConcurrentTurns == nil {
		out.MaxConcurrentTurns = defaults.MaxConcurrentTurns
	}
	return out
}

// Rate returns the request rate of resolved limits: requests a second and the burst, ok false
// when there is no rate limit.
func (l Limits) Rate() (perSecond float64, burst int, ok bool) {
	if l.RequestsPerSecond == nil {
		return 0, 0, false
	}
	perSecond, burst = *l.RequestsPerSecond, int(math.Ceil(*l.RequestsPerSecond))
	if l.Burst != nil {
		burst = *l.Burst
	}
	return perSecond, max(burst, 1), true
}

// CodeQuotaExceeded is the application error code (HTTP 429) of a request refused by one of a
// tenant's quotas: tokens per day, sessions, stored log bytes.
const CodeQuotaExceeded = fault.QuotaExceeded

// CodeTokenQuotaExceeded is the `turn/end.reason.error.code` of a turn that did not start because
// its tenant's tokens of the day reached Limits.TokensPerDay (docs/events.md).
const CodeTokenQuotaExceeded = "TOKEN_QUOTA_EXCEEDED"

// TokensExceeded returns the quota_exceeded error of a tenant whose tokens of today (used) reached
// limit, at now, with the wait until the next UTC day (sent as Retry-After).
func TokensExceeded(used, limit int64, now time.Time) error {
	next := now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	return &fault.Error{Code: CodeQuotaExceeded, Err: fault.Wait(next.Sub(now)), Message: fmt.Sprintf(
		"the tenant used %d tokens today (UTC), its quota is %d a day; turns start again at %s",
		used, limit, next.Format(time.RFC3339))}
}
