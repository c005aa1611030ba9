package api

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/tenant"
)

// Usage, quotas and rate limits of tenants (docs/usage-and-quotas.md): GET /v1/usage for a tenant,
// GET /v1/tenants/{id}/usage and GET/PUT /v1/tenants/{id}/limits for the operator, and the
// request limiter every authenticated request passes (rateLimit).

// Bounds of a usage query's range.
const (
	defaultUsageDays = 30
	maxUsageDays     = 366
)

// usageRowJSON is one group of usage as the API shows it: its key (day, sessionId, sessionId and
// turn, presetId; none for the total), its turns, their run time and their usage.
type usageRowJSON struct {
	Day       string     `json:"day,omitempty"`
	SessionID *uuid.UUID `json:"sessionId,omitempty"`
	Turn      *int       `json:"turn,omitempty"`
	PresetID  *uuid.UUID `json:"presetId,omitempty"`
	StartedAt *time.Time `json:"startedAt,omitempty"`
	EndedAt   *time.Time `json:"endedAt,omitempty"`
	EndKind   *string    `json:"endKind,omitempty"`
	Turns     int64      `json:"turns"`
	RunTimeMs int64      `json:"runTimeMs"`
	Usage     usageJSON  `json:"usage"`
}

// usagePage is the answer of a usage query: its range and grouping, and a page of rows.
type usagePage struct {
	From       time.Time      `json:"from"`
	To         time.Time      `json:"to"`
	GroupBy    string         `json:"groupBy"`
	Items      []usageRowJSON `json:"items"`
	NextCursor string         `json:"nextCursor"`
}

// usageTime parses a usage bound: an RFC 3339 time, or a date (YYYY-MM-DD, UTC), which is its
// day's start for from and its day's end for to (so from=to=a day is that day).
func usageTime(r *http.Request, name string, end bool) (time.Time, bool, error) {
	raw := r.URL.Query().Get(name)
	if raw == "" {
		return time.Time{}, false, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, raw); err == nil {
		return t.UTC(), true, nil
	}
	d, err := time.Parse(time.DateOnly, raw)
	if err != nil {
		return time.Time{}, false, fieldError(queryPointer(name), name+" must be an RFC 3339 time (2026-01-02T15:04:05Z) or a date (2026-01-02)")
	}
	if end {
		d = d.Add(24 * time.Hour)
	}
	return d, true, nil
}

// usageQuery reads the parameters of a usage query of tenantID: from and to (default: the last
// 30 UTC days, today included; at most 366 days), groupBy (default day), cursor and limit.
func usageQuery(r *http.Request, tenantID uuid.UUID) (pgstore.UsageQuery, error) {
	q := pgstore.UsageQuery{Tenant: tenantID, GroupBy: r.URL.Query().Get("groupBy"), Cursor: r.URL.Query().Get("cursor")}
	from, hasFrom, err := usageTime(r, "from", false)
	if err != nil {
		return q, err
	}
	to, hasTo, err := usageTime(r, "to", true)
	if err != nil {
		return q, err
	}
	span := time.Duration(defaultUsageDays) * 24 * time.Hour
	switch {
	case !hasTo && !hasFrom:
		to = time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
		from = to.Add(-span)
	case !hasTo:
		to = from.Add(span)
	case !hasFrom:
		from = to.Add(-span)
	}
	switch {
	case from.Year() < 1970 || to.Year() > 9999:
		return q, errorf(CodeInvalidRequest, "from and to must be between 1970 and 9999")
	case !to.After(from):
		return q, fieldError(queryPointer("to"), "to must be after from")
	case to.Sub(from) > time.Duration(maxUsageDays)*24*time.Hour:
		return q, fieldError(queryPointer("to"), fmt.Sprintf("the range from from to to must be at most %d days", maxUsageDays))
	}
	q.From, q.To = from, to
	if q.GroupBy == "" {
		q.GroupBy = pgstore.UsageByDay
	}
	valid := false
	for _, g := range pgstore.UsageGroupings {
		valid = valid || q.GroupBy == g
	}
	if !valid {
		return q, fieldError(queryPointer("groupBy"), "groupBy must be one of "+strings.Join(pgstore.UsageGroupings, ", "))
	}
	limit, err := intParam(r, "limit", 100, 1, pgstore.MaxUsageLimit)
	q.Limit = int(limit)
	return q, err
}

// writeUsage answers a usage query of tenantID: 200 {from, to, groupBy, items, nextCursor}.
func (s *Server) writeUsage(w http.ResponseWriter, r *http.Request, tenantID uuid.UUID) {
	q, err := usageQuery(r, tenantID)
	if err != nil {
		writeError(w, r, err)
		return
	}
	p, err := s.cfg.Log.Usage(r.Context(), q)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := usagePage{From: q.From, To: q.To, GroupBy: q.GroupBy, Items: make([]usageRowJSON, 0, len(p.Rows)), NextCursor: p.Next}
	for _, row := range p.Rows {
		out.Items = append(out.Items, usageRowJSON{Day: row.Day, SessionID: row.SessionID, Turn: row.Turn,
			PresetID: row.PresetID, StartedAt: utcPtr(row.StartedAt), EndedAt: utcPtr(row.EndedAt), EndKind: row.EndKind,
			Turns: row.Turns, RunTimeMs: row.RunTimeMs, Usage: row.Usage})
	}
	writeJSON(w, http.StatusOK, out)
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// handleUsage answers the authenticated tenant's usage.
func (s *Server) handleUsage(w http.ResponseWriter, r *http.Request) {
	s.writeUsage(w, r, tenantID(r))
}

// adminTenant reads the {id} of an admin route: the tenant must exist.
func (s *Server) adminTenant(r *http.Request) (uuid.UUID, error) {
	id, err := pathID(r, "tenant")
	if err != nil {
		return uuid.Nil, err
	}
	if _, err := s.cfg.Tenants.TenantGet(r.Context(), id); err != nil {
		return uuid.Nil, err
	}
	info(r).tenant = id
	return id, nil
}

// handleTenantUsage answers a tenant's usage to the operator.
func (s *Server) handleTenantUsage(w http.ResponseWriter, r *http.Request) {
	id, err := s.adminTenant(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.writeUsage(w, r, id)
}

// limitsJSON is a tenant's limits as the operator set them (null: the server's default) and as
// they apply (effective: the server's defaults filled in; null there: no limit).
type limitsJSON struct {
	TenantID  uuid.UUID     `json:"tenantId"`
	Limits    tenant.Limits `json:"limits"`
	Effective tenant.Limits `json:"effective"`
}

// quotasOrDisabled answers 404 when the server keeps no quotas (a Config without Quotas).
func (s *Server) quotasOrDisabled(w http.ResponseWriter) bool {
	if s.cfg.Quotas == nil {
		writeProblem(w, CodeNotFound, "this server keeps no tenant limits")
		return false
	}
	return true
}

// handleLimitsGet answers a tenant's limits: 200 {tenantId, limits, effective}.
func (s *Server) handleLimitsGet(w http.ResponseWriter, r *http.Request) {
	if !s.quotasOrDisabled(w) {
		return
	}
	id, err := pathID(r, "tenant")
	if err != nil {
		writeError(w, r, err)
		return
	}
	l, err := s.cfg.Quotas.LimitsGet(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	info(r).tenant = id
	writeJSON(w, http.StatusOK, limitsJSON{TenantID: id, Limits: l, Effective: l.Resolve(s.cfg.Quotas.Defaults())})
}

// handleLimitsPut replaces a tenant's limits (every field; absent or null: the server's
// default): 200 {tenantId, limits, effective}. Every replica applies them within a second.
func (s *Server) handleLimitsPut(w http.ResponseWriter, r *http.Request) {
	if !s.quotasOrDisabled(w) {
		return
	}
	id, err := pathID(r, "tenant")
	if err != nil {
		writeError(w, r, err)
		return
	}
	var l tenant.Limits
	if err := decodeJSON(r, &l); err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.cfg.Quotas.LimitsSet(r.Context(), id, l); err != nil {
		writeError(w, r, pointTo(err, "requestsPerSecond", "burst", "maxConcurrentTurns", "tokensPerDay", "maxSessions", "maxLogBytes"))
		return
	}
	info(r).tenant = id
	logger(r).Info("tenant limits set")
	writeJSON(w, http.StatusOK, limitsJSON{TenantID: id, Limits: l, Effective: l.Resolve(s.cfg.Quotas.Defaults())})
}

// seconds is d in whole seconds, rounded up.
func seconds(d time.Duration) string {
	return strconv.FormatInt(int64(math.Ceil(d.Seconds())), 10)
}

// ratePolicy is the RateLimit-Policy of a rate of perSecond requests a second with burst:
// "Q;w=W;burst=B", Q requests in a window of W seconds, W the smallest whole number of seconds
// (at least one) in which the rate makes whole requests (20/s: 20;w=1; 0.2/s: 1;w=5; 2.5/s:
// 5;w=2). A rate that makes none within an hour is shown over the window of its burst, its
// requests rounded down (never more than the limiter allows).
func ratePolicy(perSecond float64, burst int) string {
	for w := 1.0; w <= 3600; w++ {
		if q := perSecond * w; q >= 1 && math.Abs(q-math.Round(q)) < 1e-9*q {
			return fmt.Sprintf("%.0f;w=%.0f;burst=%d", math.Round(q), w, burst)
		}
	}
	w := math.Ceil(float64(burst) / perSecond)
	return fmt.Sprintf("%.0f;w=%.0f;burst=%d", max(math.Floor(perSecond*w), 1), w, burst)
}

// rateLimit applies the tenant's request rate (tenant.Limits.RequestsPerSecond and Burst) to
// every authenticated request, on all replicas together (pgstore.Quotas.RateTake: one statement,
// only for a tenant that has a rate). Every answer under a rate carries the RateLimit-Limit,
// RateLimit-Remaining and RateLimit-Reset headers (draft-ietf-httpapi-ratelimit-headers-07) and
// RateLimit-Policy; a refused request answers 429 rate_limited with Retry-After. A refusal the
// replica remembers (pgstore.Quotas.RateTake) costs no statement: a flood of refused requests
// does not reach the database.
func (s *Server) rateLimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Quotas == nil {
			next.ServeHTTP(w, r)
			return
		}
		id := tenantID(r)
		l, err := s.cfg.Quotas.Effective(r.Context(), id)
		if err != nil {
			writeError(w, r, err)
			return
		}
		rate, burst, ok := l.Rate()
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		d, err := s.cfg.Quotas.RateTake(r.Context(), id, rate, burst)
		if err != nil {
			writeError(w, r, err)
			return
		}
		h := w.Header()
		h.Set("RateLimit-Limit", strconv.Itoa(d.Limit))
		h.Set("RateLimit-Remaining", strconv.Itoa(d.Remaining))
		h.Set("RateLimit-Reset", seconds(d.Reset))
		h.Set("RateLimit-Policy", ratePolicy(rate, d.Limit))
		if !d.Allowed {
			writeError(w, r, &fault.Error{Code: CodeRateLimited, Err: fault.Wait(d.RetryAfter),
				Message: fmt.Sprintf("the tenant may make %s requests a second (bursts of %d); retry after %v",
					strconv.FormatFloat(rate, 'f', -1, 64), burst, d.RetryAfter.Round(time.Millisecond))})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// checkQuota refuses, with 429 quota_exceeded, what the tenant's quotas no longer allow (what:
// pgstore.ForSession, ForPost). It reports whether the request may go on.
func (s *Server) checkQuota(w http.ResponseWriter, r *http.Request, what int) bool {
	if err := s.cfg.Quotas.Check(r.Context(), tenantID(r), what); err != nil {
		writeError(w, r, err)
		return false
	}
	return true
}
