package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/dshd/dshd/api"
)

func TestAuthRequiresKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, key := range []string{"", "dshd_unknown", "not-even-a-key", adminToken} {
		e.do(t, "GET", "/v1/presets", key, nil).wantProblem(t, http.StatusUnauthorized, "unauthorized")
		e.do(t, "GET", "/v1/sessions", key, nil).wantProblem(t, http.StatusUnauthorized, "unauthorized")
	}
	r := e.do(t, "GET", "/v1/presets", "", nil, "Authorization", "Basic "+e.keyA)
	r.wantProblem(t, http.StatusUnauthorized, "unauthorized")
	if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("WWW-Authenticate = %q", r.header.Get("WWW-Authenticate"))
	}
	e.do(t, "GET", "/v1/presets", e.keyA, nil).want(t, http.StatusOK)
}

func TestTenantCreateWithAdminToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tok := range []string{"", "wrong", e.keyA} {
		e.do(t, "POST", "/v1/tenants", tok, `{"name":"x"}`).wantProblem(t, http.StatusUnauthorized, "unauthorized")
	}
	var created struct {
		ID     uuid.UUID
		Name   string
		APIKey string
	}
	e.do(t, "POST", "/v1/tenants", adminToken, `{"name":"acme"}`).want(t, http.StatusCreated).json(t, &created)
	if created.ID == uuid.Nil || created.Name != "acme" || !strings.HasPrefix(created.APIKey, "dshd_") {
		t.Fatalf("created %+v", created)
	}
	var list struct{ Items []any }
	e.do(t, "GET", "/v1/presets", created.APIKey, nil).want(t, http.StatusOK).json(t, &list)
	if len(list.Items) != 0 {
		t.Fatalf("a new tenant sees %d presets", len(list.Items))
	}
	e.do(t, "POST", "/v1/tenants", adminToken, `{"name":""}`).wantProblem(t, http.StatusBadRequest, "invalid_request")
}

func TestTenantCreateDisabledWithoutAdminToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.AdminToken = "" })
	p := e.do(t, "POST", "/v1/tenants", "", `{"name":"x"}`).wantProblem(t, http.StatusUnauthorized, "unauthorized")
	if !strings.Contains(p.Detail, "DSHD_ADMIN_TOKEN") {
		t.Errorf("detail %q does not say how to enable it", p.Detail)
	}
}

// TestCrossTenantAnswers404 checks that another tenant's session, preset, page of events and
// stream answer 404 problems, exactly like ids that do not exist.
func TestCrossTenantAnswers404(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pid := e.presetCreate(t, e.keyA, minimalPreset)
	sid := e.sessionCreate(t, e.keyA)
	e.appendEvents(sid, turnStart(1), turnEnd(1))
	sse := []string{"Accept", "text/event-stream"}
	for _, tc := range []struct {
		method, path string
		body         any
		headers      []string
	}{
		{"GET", "/v1/presets/" + pid.String(), nil, nil},
		{"PUT", "/v1/presets/" + pid.String(), minimalPreset, nil},
		{"DELETE", "/v1/presets/" + pid.String(), nil, nil},
		{"GET", "/v1/sessions/" + sid.String(), nil, nil},
		{"GET", "/v1/sessions/" + sid.String() + "/history", nil, nil},
		{"GET", "/v1/sessions/" + sid.String() + "/events", nil, nil},
		{"GET", "/v1/sessions/" + sid.String() + "/events?after=0", nil, sse},
		{"DELETE", "/v1/sessions/" + sid.String(), nil, nil},
		{"POST", "/v1/sessions", map[string]any{"presetId": pid}, nil},
		{"POST", "/v1/sessions", map[string]any{"fork": map[string]any{"sessionId": sid}}, nil},
	} {
		e.do(t, tc.method, tc.path, e.keyB, tc.body, tc.headers...).wantProblem(t, http.StatusNotFound, "not_found")
	}
	var list struct{ Items []any }
	e.do(t, "GET", "/v1/sessions", e.keyB, nil).want(t, http.StatusOK).json(t, &list)
	if len(list.Items) != 0 {
		t.Fatalf("tenant B lists %d sessions of tenant A", len(list.Items))
	}
	e.do(t, "GET", "/v1/presets", e.keyB, nil).want(t, http.StatusOK).json(t, &list)
	if len(list.Items) != 0 {
		t.Fatalf("tenant B lists %d presets of tenant A", len(list.Items))
	}
	// Nothing of A changed.
	e.do(t, "GET", "/v1/presets/"+pid.String(), e.keyA, nil).want(t, http.StatusOK)
	e.do(t, "GET", "/v1/sessions/"+sid.String()+"/events", e.keyA, nil).want(t, http.StatusOK)
	// Ids that are not UUIDs name nothing either.
	e.do(t, "GET", "/v1/sessions/nope", e.keyA, nil).wantProblem(t, http.StatusNotFound, "not_found")
	e.do(t, "GET", "/v1/presets/nope", e.keyA, nil).wantProblem(t, http.StatusNotFound, "not_found")
}
