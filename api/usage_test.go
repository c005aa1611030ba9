package api_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

func init() { contractExtras = append(contractExtras, usageContract) }

// usageTurn is a whole turn whose model call used in and out tokens, in one batch.
func usageTurn(n int, in, out int) []eventlog.NewEvent {
	msg := llm.Message{ID: uuid.NewString(), Role: "assistant", Content: []llm.Block{{Type: "text", Text: "ok"}},
		Source: llm.Source{Kind: "model", Provider: "scripted", Model: "m"}}
	return []eventlog.NewEvent{turnStart(n), stepStart(n, 1),
		{Type: "assistant/message", SurfaceOp: eventlog.Append, Data: eventlog.AssistantMessage{Turn: n, Step: 1,
			Message: msg, Usage: &llm.Usage{InputTokens: in, OutputTokens: out}}},
		stepEnd(n, 1), turnEnd(n)}
}

// newTenant creates a tenant with the admin token and returns its id and key.
func (r *replica) newTenant(t testing.TB, name string) (uuid.UUID, string) {
	t.Helper()
	var tn struct {
		ID     uuid.UUID
		APIKey string
	}
	r.do(t, "POST", "/v1/tenants", adminToken, map[string]string{"name": name}).want(t, http.StatusCreated).json(t, &tn)
	return tn.ID, tn.APIKey
}

// usageContract checks the usage and limits endpoints against openapi.yaml.
func usageContract(t *testing.T, e *env, c *contract, sid, runSid string) {
	for _, g := range []string{"", "day", "session", "turn", "preset", "none"} {
		// An empty groupBy is read as absent, which openapi.yaml's enum does not promise.
		c.check("GET", "/v1/usage", e.doLenient(t, "GET", "/v1/usage?groupBy="+g+"&limit=1", e.keyA, nil).want(t, 200))
	}
	c.check("GET", "/v1/usage", e.do(t, "GET", "/v1/usage?groupBy=week", e.keyA, nil).want(t, 400))
	c.check("GET", "/v1/usage", e.do(t, "GET", "/v1/usage", "", nil).want(t, 401))
	ta := "/v1/tenants/" + e.tenantA.String()
	c.check("GET", "/v1/tenants/{id}/usage", e.do(t, "GET", ta+"/usage?groupBy=session", adminToken, nil).want(t, 200))
	c.check("GET", "/v1/tenants/{id}/usage", e.do(t, "GET", ta+"/usage?from=yesterday", adminToken, nil).want(t, 400))
	c.check("GET", "/v1/tenants/{id}/usage", e.do(t, "GET", ta+"/usage", e.keyA, nil).want(t, 401))
	c.check("GET", "/v1/tenants/{id}/usage", e.do(t, "GET", "/v1/tenants/"+uuid.NewString()+"/usage", adminToken, nil).want(t, 404))

	id, key := e.newTenant(t, "limited")
	tl := "/v1/tenants/" + id.String() + "/limits"
	c.check("GET", "/v1/tenants/{id}/limits", e.do(t, "GET", tl, adminToken, nil).want(t, 200))
	c.check("GET", "/v1/tenants/{id}/limits", e.do(t, "GET", tl, key, nil).want(t, 401))
	c.check("GET", "/v1/tenants/{id}/limits", e.do(t, "GET", "/v1/tenants/"+uuid.NewString()+"/limits", adminToken, nil).want(t, 404))
	c.check("PUT", "/v1/tenants/{id}/limits", e.do(t, "PUT", tl, adminToken, `{"requestsPerSecond":0.5,"burst":1,"maxConcurrentTurns":2,
		"tokensPerDay":1000,"maxSessions":10,"maxLogBytes":1048576}`).want(t, 200))
	c.check("PUT", "/v1/tenants/{id}/limits", e.do(t, "PUT", tl, adminToken, `{"burst":0}`).want(t, 400))
	c.check("PUT", "/v1/tenants/{id}/limits", e.do(t, "PUT", tl, key, `{}`).want(t, 401))
	c.check("PUT", "/v1/tenants/{id}/limits", e.do(t, "PUT", "/v1/tenants/"+uuid.NewString()+"/limits", adminToken, `{}`).want(t, 404))
	c.check("GET", "/v1/usage", e.do(t, "GET", "/v1/usage", key, nil).want(t, 200))
	c.check("GET", "/v1/usage", e.do(t, "GET", "/v1/usage", key, nil).want(t, 429))
	c.check("PUT", "/v1/tenants/{id}/limits", e.do(t, "PUT", tl, adminToken, `{}`).want(t, 200))
}

// TestUsageEndpoint: GET /v1/usage sums the tenant's turns by day, session, turn and in total,
// pages sessions and turns, sees no other tenant's usage, and the operator's view of a tenant is
// the same; bad parameters answer 400 invalid_request.
func TestUsageEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s1, s2 := e.sessionCreate(t, e.keyA), e.sessionCreate(t, e.keyA)
	e.appendEvents(s1, usageTurn(1, 100, 10)...)
	e.appendEvents(s1, usageTurn(2, 50, 5)...)
	e.appendEvents(s2, usageTurn(1, 7, 3)...)
	type row struct {
		Day       string
		SessionID *uuid.UUID
		Turn      *int
		PresetID  *uuid.UUID
		Turns     int64
		RunTimeMs int64
		Usage     eventlog.Usage
	}
	type page struct {
		From, To   time.Time
		GroupBy    string
		Items      []row
		NextCursor string
	}
	get := func(key, path string) page {
		t.Helper()
		var p page
		e.do(t, "GET", path, key, nil).want(t, 200).json(t, &p)
		return p
	}
	p := get(e.keyA, "/v1/usage")
	today := time.Now().UTC().Format(time.DateOnly)
	if p.GroupBy != "day" || len(p.Items) != 1 || p.Items[0].Day != today || p.Items[0].Turns != 3 ||
		p.Items[0].Usage.InputTokens != 157 || p.Items[0].Usage.OutputTokens != 18 || p.Items[0].Usage.ModelCalls != 3 ||
		p.To.Sub(p.From) != 30*24*time.Hour || !p.To.After(time.Now()) {
		t.Fatalf("by day: %+v", p)
	}
	if p := get(e.keyA, "/v1/usage?groupBy=none&from="+today+"&to="+today); len(p.Items) != 1 || p.Items[0].Usage.Tokens() != 175 {
		t.Fatalf("today's total: %+v", p)
	}
	if p := get(e.keyB, "/v1/usage?groupBy=none"); len(p.Items) != 1 || p.Items[0].Turns != 0 {
		t.Fatalf("tenant B's total: %+v", p)
	}
	first := get(e.keyA, "/v1/usage?groupBy=session&limit=1")
	if len(first.Items) != 1 || first.NextCursor == "" {
		t.Fatalf("a first page of sessions: %+v", first)
	}
	second := get(e.keyA, "/v1/usage?groupBy=session&limit=1&cursor="+first.NextCursor)
	if len(second.Items) != 1 || second.NextCursor != "" || *second.Items[0].SessionID == *first.Items[0].SessionID ||
		first.Items[0].Turns+second.Items[0].Turns != 3 {
		t.Fatalf("the second page of sessions: %+v after %+v", second, first)
	}
	turns := get(e.keyA, "/v1/usage?groupBy=turn")
	if len(turns.Items) != 3 || turns.Items[0].Turn == nil || turns.Items[0].SessionID == nil {
		t.Fatalf("by turn: %+v", turns)
	}
	if presets := get(e.keyA, "/v1/usage?groupBy=preset"); len(presets.Items) != 2 || presets.Items[0].PresetID == nil {
		t.Fatalf("by preset (each session has its own): %+v", presets)
	}
	admin := get(adminToken, "/v1/tenants/"+e.tenantA.String()+"/usage?groupBy=turn")
	if len(admin.Items) != 3 || admin.Items[2].Usage != turns.Items[2].Usage {
		t.Fatalf("the operator's view: %+v, the tenant's %+v", admin, turns)
	}
	for _, q := range []string{"from=2026-13-01", "to=soon", "from=2026-01-02&to=2026-01-01", "from=2024-01-01&to=2026-01-01",
		"groupBy=hour", "from=1960-01-01", "to=9999-12-31", "from=2026-01-01T00:00:00%2001:00", "groupBy=turn&cursor=abc", "groupBy=session&limit=0", "groupBy=session&limit=1001"} {
		e.do(t, "GET", "/v1/usage?"+q, e.keyA, nil).wantProblem(t, 400, "invalid_request")
	}
}

// TestRequestRate: a tenant limited to a request every 5 s with a burst of 2 gets two answers with
// the RateLimit headers counting down, then 429 rate_limited with Retry-After; health is not
// limited, a stream opened with a stream token counts, and another tenant is not limited at all
// (no headers).
func TestRequestRate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionCreate(t, e.keyA)
	var tok struct{ StreamURL string }
	e.do(t, "POST", "/v1/sessions/"+sid.String()+"/stream-tokens", e.keyA, nil).want(t, 201).json(t, &tok)
	// A request every 5 s: the test's own pace cannot refill one.
	e.do(t, "PUT", "/v1/tenants/"+e.tenantA.String()+"/limits", adminToken, `{"requestsPerSecond":0.2,"burst":2}`).want(t, 200)
	for i := range 2 {
		r := e.do(t, "GET", "/v1/tools", e.keyA, nil).want(t, 200)
		reset, _ := strconv.Atoi(r.header.Get("RateLimit-Reset"))
		if r.header.Get("RateLimit-Limit") != "2" || r.header.Get("RateLimit-Remaining") != strconv.Itoa(1-i) ||
			reset < 5*i+1 || reset > 5*(i+1) || r.header.Get("RateLimit-Policy") != "1;w=5;burst=2" {
			t.Fatalf("request %d: headers %v", i, r.header)
		}
	}
	r := e.do(t, "GET", "/v1/sessions", e.keyA, nil)
	p := r.wantProblem(t, 429, "rate_limited")
	// A stream's (re)connect with a stream token counts as a request of its tenant.
	e.do(t, "GET", tok.StreamURL, "", nil, "Accept", "text/event-stream").wantProblem(t, 429, "rate_limited")
	if ra, _ := strconv.Atoi(r.header.Get("Retry-After")); ra < 1 || ra > 5 || r.header.Get("RateLimit-Remaining") != "0" {
		t.Fatalf("refused: %+v, headers %v", p, r.header)
	}
	e.do(t, "GET", "/healthz", "", nil).want(t, 200)
	if r := e.do(t, "GET", "/v1/tools", e.keyB, nil).want(t, 200); r.header.Get("RateLimit-Limit") != "" {
		t.Fatalf("tenant B has no rate: %v", r.header)
	}
	e.do(t, "PUT", "/v1/tenants/"+e.tenantA.String()+"/limits", adminToken, `{}`).want(t, 200)
	if r := e.do(t, "GET", "/v1/tools", e.keyA, nil).want(t, 200); r.header.Get("RateLimit-Limit") != "" {
		t.Fatalf("a lifted limit holds at once on the replica that lifted it: %v", r.header)
	}
}

// TestStorageQuotas: a tenant at its session quota cannot create or fork another until it
// deletes one; past its stored log bytes it can neither create sessions nor post; past its
// tokens of the day it cannot post, and the refusal says until when.
func TestStorageQuotas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	limits := "/v1/tenants/" + e.tenantA.String() + "/limits"
	s1 := e.sessionCreate(t, e.keyA)
	e.do(t, "PUT", limits, adminToken, `{"maxSessions":1}`).want(t, 200)
	pid := e.presetCreate(t, e.keyA, minimalPreset)
	e.do(t, "POST", "/v1/sessions", e.keyA, map[string]any{"presetId": pid}).wantProblem(t, 429, "quota_exceeded")
	e.do(t, "POST", "/v1/sessions", e.keyA, map[string]any{"fork": map[string]any{"sessionId": s1}}).wantProblem(t, 429, "quota_exceeded")
	e.sessionCreate(t, e.keyB) // another tenant's quota is its own
	e.do(t, "DELETE", "/v1/sessions/"+s1.String(), e.keyA, nil).want(t, 204)
	var s2 struct{ ID uuid.UUID }
	e.do(t, "POST", "/v1/sessions", e.keyA, map[string]any{"presetId": pid}).want(t, 201).json(t, &s2)

	e.do(t, "PUT", limits, adminToken, `{"maxLogBytes":200}`).want(t, 200)
	msgs := "/v1/sessions/" + s2.ID.String() + "/messages"
	e.appendEvents(s2.ID, eventlog.NewEvent{Type: "user/message", Data: llm.NewUserMessage("u1", "hello"), SurfaceOp: eventlog.Append})
	e.do(t, "POST", msgs, e.keyA, `{"content":"text","mode":"inject"}`).want(t, 202) // under 200 bytes still
	e.appendEvents(s2.ID, usageTurn(1, 40, 2)...)
	e.do(t, "POST", msgs, e.keyA, `{"content":"text"}`).wantProblem(t, 429, "quota_exceeded")
	e.do(t, "POST", "/v1/sessions", e.keyA, map[string]any{"presetId": pid}).wantProblem(t, 429, "quota_exceeded")

	e.do(t, "PUT", limits, adminToken, `{"tokensPerDay":42}`).want(t, 200)
	r := e.do(t, "POST", msgs, e.keyA, `{"content":"text"}`)
	r.wantProblem(t, 429, "quota_exceeded")
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || ra > 86400 {
		t.Fatalf("Retry-After %q: until the next UTC day", r.header.Get("Retry-After"))
	}
	e.do(t, "PUT", limits, adminToken, `{"tokensPerDay":43}`).want(t, 200)
	e.do(t, "POST", msgs, e.keyA, `{"content":"text","mode":"inject"}`).want(t, 202)
}

// TestLimitsEndpoint: limits are stored as set, shown with the server's defaults filled in, and
// validated; unknown tenants answer 404 and tenant keys 401.
func TestLimitsEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	path := "/v1/tenants/" + e.tenantA.String() + "/limits"
	type view struct {
		TenantID  uuid.UUID
		Limits    map[string]any
		Effective map[string]any
	}
	var v view
	e.do(t, "GET", path, adminToken, nil).want(t, 200).json(t, &v)
	if v.TenantID != e.tenantA || v.Limits["requestsPerSecond"] != nil || len(v.Limits) != 6 {
		t.Fatalf("no limits: %+v", v)
	}
	e.do(t, "PUT", path, adminToken, `{"requestsPerSecond":2.5,"maxSessions":0}`).want(t, 200)
	e.do(t, "GET", path, adminToken, nil).want(t, 200).json(t, &v)
	if v.Limits["requestsPerSecond"] != 2.5 || v.Limits["maxSessions"] != 0.0 || v.Limits["burst"] != nil || v.Effective["maxSessions"] != 0.0 {
		t.Fatalf("as set: %+v", v)
	}
	e.do(t, "POST", "/v1/sessions", e.keyA, map[string]any{"presetId": e.presetCreate(t, e.keyA, minimalPreset)}).wantProblem(t, 429, "quota_exceeded")
	for _, body := range []string{`{"requestsPerSecond":0}`, `{"requestsPerSecond":-1}`, `{"requestsPerSecond":0.0001}`, `{"burst":0}`, `{"maxConcurrentTurns":0}`,
		`{"tokensPerDay":-1}`, `{"maxSessions":1.5}`, `{"rps":1}`, `[]`, `{"maxLogBytes":"1"}`} {
		e.do(t, "PUT", path, adminToken, body).wantProblem(t, 400, "invalid_request")
	}
	e.do(t, "PUT", path, e.keyA, `{}`).wantProblem(t, 401, "unauthorized")
	e.do(t, "PUT", "/v1/tenants/not-a-uuid/limits", adminToken, `{}`).wantProblem(t, 404, "not_found")
	e.do(t, "GET", "/v1/tenants/"+uuid.NewString()+"/limits", adminToken, nil).wantProblem(t, 404, "not_found")
}
