package api_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/dshd/dshd/api"
)

// TestBadInputAnswers4xx: malformed JSON, oversized bodies, bad parameters and a non-numeric
// Last-Event-ID answer 400 or 413 problems, never 500.
func TestBadInputAnswers4xx(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.MaxBodyBytes = 4096 })
	sid := e.sessionCreate(t, e.keyA)
	events := "/v1/sessions/" + sid.String() + "/events"
	sse := []string{"Accept", "text/event-stream"}
	huge := `{"name":"` + strings.Repeat("x", 8192) + `","model":{"provider":"scripted","model":"m"}}`
	for _, tc := range []struct {
		name, method, path string
		body               any
		headers            []string
		status             int
		code, detail       string
	}{
		{"malformed JSON", "POST", "/v1/presets", `{"name":`, nil, 400, "invalid_request", "malformed JSON"},
		{"syntax error", "POST", "/v1/presets", `{"name" "x"}`, nil, 400, "invalid_request", "malformed JSON at byte"},
		{"empty body", "POST", "/v1/presets", "", nil, 400, "invalid_request", "empty"},
		{"not an object", "POST", "/v1/presets", `[1]`, nil, 400, "invalid_request", "the body: must be an object"},
		{"trailing data", "POST", "/v1/presets", minimalPreset + ` {}`, nil, 400, "invalid_request", "single JSON value"},
		{"unknown field", "POST", "/v1/presets", `{"name":"p","modle":{}}`, nil, 400, "invalid_request", `unknown field "modle"`},
		{"wrong type", "POST", "/v1/presets", `{"name":"p","model":{"provider":"scripted","model":"m"},"tools":{"maxParallelToolCalls":1.5}}`, nil, 400, "invalid_request", "tools.maxParallelToolCalls: must be an integer"},
		{"oversized body", "POST", "/v1/presets", huge, nil, 413, "payload_too_large", "larger than the limit"},
		{"oversized session body", "POST", "/v1/sessions", `{"presetId":"` + strings.Repeat(" ", 5000) + `"}`, nil, 413, "payload_too_large", "limit"},
		{"bad session body", "POST", "/v1/sessions", `{"presetId":"not-a-uuid"}`, nil, 400, "invalid_request", "malformed JSON"},
		{"no preset", "POST", "/v1/sessions", `{}`, nil, 400, "invalid_request", "presetId is required"},
		{"after not a number", "GET", events + "?after=x", nil, nil, 400, "invalid_request", "after must be an integer"},
		{"after too small", "GET", events + "?after=-2", nil, nil, 400, "invalid_request", "after must be an integer"},
		{"limit zero", "GET", events + "?limit=0", nil, nil, 400, "invalid_request", "limit must be an integer from 1 to 1000"},
		{"list limit", "GET", "/v1/presets?limit=100000", nil, nil, 400, "invalid_request", "limit must be an integer from 1 to 500"},
		{"preset cursor", "GET", "/v1/presets?cursor=garbage!", nil, nil, 400, "invalid_request", "invalid cursor"},
		{"session cursor", "GET", "/v1/sessions?cursor=garbage!", nil, nil, 400, "invalid_request", "invalid cursor"},
		{"Last-Event-ID not a number", "GET", events, nil, append(sse, "Last-Event-ID", "abc"), 400, "invalid_request", "Last-Event-ID"},
		{"Last-Event-ID negative", "GET", events, nil, append(sse, "Last-Event-ID", "-5"), 400, "invalid_request", "Last-Event-ID"},
		{"stream after", "GET", events + "?after=x", nil, sse, 400, "invalid_request", "after"},
		{"unknown endpoint", "GET", "/v1/nope", nil, nil, 404, "not_found", "no such endpoint"},
		{"wrong method", "PATCH", "/v1/presets", nil, nil, 405, "method_not_allowed", "PATCH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := e.do(t, tc.method, tc.path, e.keyA, tc.body, tc.headers...).wantProblem(t, tc.status, tc.code)
			if !strings.Contains(p.Detail, tc.detail) {
				t.Errorf("detail %q does not contain %q", p.Detail, tc.detail)
			}
		})
	}
}

func TestReadyzReportsNotReady(t *testing.T) {
	t.Parallel()
	ready := make(chan error, 1)
	ready <- nil
	e := newEnv(t, func(c *api.Config) {
		c.Ready = func(ctx context.Context) error { return <-ready }
	})
	e.do(t, "GET", "/readyz", "", nil).want(t, http.StatusOK)
	ready <- errors.New("migrations pending")
	p := e.do(t, "GET", "/readyz", "", nil).wantProblem(t, http.StatusServiceUnavailable, "not_ready")
	if !strings.Contains(p.Detail, "migrations pending") {
		t.Errorf("detail %q", p.Detail)
	}
	e.do(t, "GET", "/healthz", "", nil).want(t, http.StatusOK)
}

// TestHostileStringsAnswer400: strings PostgreSQL cannot store, and header or query values that
// are not printable, are the client's error, never a 500.
func TestHostileStringsAnswer400(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionCreate(t, e.keyA)
	for _, c := range []struct {
		method, path, key string
		body              any
		headers           []string
	}{
		{"POST", "/v1/presets", e.keyA, `{"name":"a\u0000b","model":{"provider":"scripted","model":"m"}}`, nil},
		{"POST", "/v1/presets", e.keyA, `{"name":"p","model":{"provider":"scripted","model":"m"},"prompt":{"persona":"x\u0000"}}`, nil},
		{"POST", "/v1/tenants", adminToken, `{"name":"t\u0000"}`, nil},
		{"GET", "/v1/sessions/" + sid.String() + "/events?types=%ff", e.keyA, nil, nil},
		{"GET", "/v1/sessions/" + sid.String() + "/events?types=a%00b", e.keyA, nil, nil},
		{"POST", "/v1/sessions/" + sid.String() + "/messages", e.keyA, `{"content":"x"}`, []string{"Idempotency-Key", "k\xff"}},
	} {
		r := e.do(t, c.method, c.path, c.key, c.body, c.headers...)
		if r.status != 400 {
			t.Errorf("%s %s: status %d %s, want 400", c.method, c.path, r.status, r.body)
		}
	}
}
