package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/webhook"
)

func init() { contractExtras = append(contractExtras, webhooksContract) }

type hookEndpoint struct {
	ID          string
	URL         string
	Events      []string
	Description string
	DisabledAt  *string
	Secret      *string
}

type hookDelivery struct {
	ID, EventID, EventType, Status string
	Attempts                       int
}

// webhooksContract exercises every /v1/webhooks operation for TestOpenAPIDescribesResponses.
func webhooksContract(t *testing.T, e *env, c *contract, _, _ string) {
	var ep hookEndpoint
	body := map[string]any{"url": "https://hooks.example.com/dshd", "events": pgstore.WebhookEventTypes, "description": "ci"}
	c.check("POST", "/v1/webhooks", e.do(t, "POST", "/v1/webhooks", e.keyA, body).want(t, 201)).json(t, &ep)
	c.check("POST", "/v1/webhooks", e.do(t, "POST", "/v1/webhooks", e.keyA, `{"url":"https://h.example.com","events":["nope"]}`).want(t, 400))
	c.check("POST", "/v1/webhooks", e.do(t, "POST", "/v1/webhooks", e.keyA, `{"url":"https://127.0.0.1/x","events":["session.idle"]}`).want(t, 400))
	c.check("POST", "/v1/webhooks", e.do(t, "POST", "/v1/webhooks", "", body).want(t, 401))
	c.check("GET", "/v1/webhooks", e.do(t, "GET", "/v1/webhooks?limit=1", e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/webhooks", e.do(t, "GET", "/v1/webhooks?cursor=x", e.keyA, nil).want(t, 400))
	path := "/v1/webhooks/" + ep.ID
	c.check("GET", "/v1/webhooks/{id}", e.do(t, "GET", path, e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/webhooks/{id}", e.do(t, "GET", path, e.keyB, nil).want(t, 404))
	c.check("PATCH", "/v1/webhooks/{id}", e.do(t, "PATCH", path, e.keyA, `{"description":"renamed"}`).want(t, 200))
	c.check("PATCH", "/v1/webhooks/{id}", e.do(t, "PATCH", path, e.keyA, `{"events":[]}`).want(t, 400))
	c.check("PATCH", "/v1/webhooks/{id}", e.do(t, "PATCH", path, e.keyB, `{}`).want(t, 404))
	c.check("POST", "/v1/webhooks/{id}/rotate-secret", e.do(t, "POST", path+"/rotate-secret", e.keyA, nil).want(t, 200))
	c.check("POST", "/v1/webhooks/{id}/rotate-secret", e.do(t, "POST", path+"/rotate-secret", e.keyB, nil).want(t, 404))

	sid := e.sessionCreate(t, e.keyA)
	e.appendEvents(sid, turnStart(1), turnEnd(1))
	var log struct{ Items []hookDelivery }
	c.check("GET", "/v1/webhooks/{id}/deliveries", e.do(t, "GET", path+"/deliveries", e.keyA, nil).want(t, 200)).json(t, &log)
	c.check("GET", "/v1/webhooks/{id}/deliveries", e.do(t, "GET", path+"/deliveries?limit=0", e.keyA, nil).want(t, 400))
	c.check("GET", "/v1/webhooks/{id}/deliveries", e.do(t, "GET", path+"/deliveries", e.keyB, nil).want(t, 404))
	// Other sessions of the tenant may end turns meanwhile (the contract's message posts): only
	// this session's delivery is looked at.
	var mine []hookDelivery
	for _, d := range log.Items {
		if strings.HasPrefix(d.EventID, sid.String()+":") {
			mine = append(mine, d)
		}
	}
	if len(mine) != 1 || mine[0].Status != "pending" {
		t.Fatalf("delivery log %+v", log.Items)
	}
	retry := path + "/deliveries/" + mine[0].ID + "/retry"
	c.check("POST", "/v1/webhooks/{id}/deliveries/{deliveryId}/retry", e.do(t, "POST", retry, e.keyA, nil).want(t, 409))
	e.do(t, "PATCH", path, e.keyA, `{"disabled":true}`).want(t, 200) // gives the pending delivery up
	if p := e.do(t, "POST", retry, e.keyA, nil).wantProblem(t, 409, "conflict"); !strings.Contains(p.Detail, "disabled") {
		t.Fatalf("retry on a disabled endpoint: %+v", p)
	}
	e.do(t, "PATCH", path, e.keyA, `{"disabled":false}`).want(t, 200)
	c.check("POST", "/v1/webhooks/{id}/deliveries/{deliveryId}/retry", e.do(t, "POST", retry, e.keyA, nil).want(t, 202))
	c.check("POST", "/v1/webhooks/{id}/deliveries/{deliveryId}/retry", e.do(t, "POST", retry, e.keyB, nil).want(t, 404))
	c.check("DELETE", "/v1/webhooks/{id}", e.do(t, "DELETE", path, e.keyA, nil).want(t, 204))
	c.check("DELETE", "/v1/webhooks/{id}", e.do(t, "DELETE", path, e.keyA, nil).want(t, 404))
}

// TestWebhookEndpointsOverHTTP: an endpoint's secret is shown at its creation and rotation only;
// bad events, a missing or oversized url, http and private hosts are refused (400
// invalid_request or webhook_url_not_allowed); another tenant sees none of it; the tenant's
// bound answers 409 too_many_webhooks.
func TestWebhookEndpointsOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.WebhookMaxEndpoints = 2 })
	var ep hookEndpoint
	resp := e.do(t, "POST", "/v1/webhooks", e.keyA, map[string]any{"url": "https://hooks.example.com/a",
		"events": []string{"turn.failed", "turn.completed", "turn.failed"}}).want(t, http.StatusCreated)
	resp.json(t, &ep)
	if ep.Secret == nil || !strings.HasPrefix(*ep.Secret, "whsec_") || resp.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("created %+v (%v)", ep, resp.header)
	}
	if key, err := webhook.ParseSecret(*ep.Secret); err != nil || len(key) != webhook.SecretBytes {
		t.Fatalf("secret %q: %v", *ep.Secret, err)
	}
	if strings.Join(ep.Events, ",") != "turn.completed,turn.failed" || ep.Description != "" || ep.DisabledAt != nil {
		t.Fatalf("events sorted without duplicates: %+v", ep)
	}
	path := "/v1/webhooks/" + ep.ID
	secretShown := func(r response) {
		t.Helper()
		if strings.Contains(string(r.body), "secret") || strings.Contains(string(r.body), "whsec_") {
			t.Fatalf("a read shows the secret: %s", r.body)
		}
	}
	secretShown(e.do(t, "GET", path, e.keyA, nil).want(t, http.StatusOK))
	secretShown(e.do(t, "GET", "/v1/webhooks", e.keyA, nil).want(t, http.StatusOK))
	secretShown(e.do(t, "PATCH", path, e.keyA, `{"url":"https://hooks.example.com/b"}`).want(t, http.StatusOK))
	var rotated hookEndpoint
	e.do(t, "POST", path+"/rotate-secret", e.keyA, nil).want(t, http.StatusOK).json(t, &rotated)
	if rotated.Secret == nil || *rotated.Secret == *ep.Secret || rotated.URL != "https://hooks.example.com/b" {
		t.Fatalf("rotated %+v", rotated)
	}
	var stored []byte
	if err := e.pool.QueryRow(context.Background(), `SELECT secret FROM webhook_endpoints WHERE id = $1`, ep.ID).Scan(&stored); err != nil ||
		webhook.FormatSecret(stored) != *rotated.Secret {
		t.Fatalf("the stored secret is not the rotated one (%v)", err)
	}

	for _, tc := range []struct {
		name, body, code, detail string
	}{
		{"no url", `{"events":["turn.completed"]}`, "invalid_request", "url is required"},
		{"no events", `{"url":"https://h.example.com"}`, "invalid_request", "events must name at least one"},
		{"unknown event", `{"url":"https://h.example.com","events":["turn.started"]}`, "invalid_request", `unknown event type "turn.started"`},
		{"long url", `{"url":"https://h.example.com/` + strings.Repeat("a", 2100) + `","events":["session.idle"]}`, "invalid_request", "at most 2048 bytes"},
		{"long description", `{"url":"https://h.example.com","events":["session.idle"],"description":"` + strings.Repeat("d", 1100) + `"}`, "invalid_request", "at most 1024"},
		{"unknown field", `{"url":"https://h.example.com","events":["session.idle"],"secret":"x"}`, "invalid_request", "unknown field"},
		{"http", `{"url":"http://hooks.example.com","events":["session.idle"]}`, "webhook_url_not_allowed", "allows no http"},
		{"loopback", `{"url":"https://127.0.0.1:8443/h","events":["session.idle"]}`, "webhook_url_not_allowed", "not a public address"},
		{"metadata", `{"url":"https://169.254.169.254/latest","events":["session.idle"]}`, "webhook_url_not_allowed", "not a public address"},
		{"private", `{"url":"https://10.0.0.7/h","events":["session.idle"]}`, "webhook_url_not_allowed", "not a public address"},
		{"localhost", `{"url":"https://localhost/h","events":["session.idle"]}`, "webhook_url_not_allowed", "loopback name"},
		{"credentials", `{"url":"https://u:p@hooks.example.com/h","events":["session.idle"]}`, "webhook_url_not_allowed", "no credentials"},
	} {
		p := e.do(t, "POST", "/v1/webhooks", e.keyA, tc.body).wantProblem(t, http.StatusBadRequest, tc.code)
		if !strings.Contains(p.Detail, tc.detail) {
			t.Errorf("%s: detail %q lacks %q", tc.name, p.Detail, tc.detail)
		}
	}
	e.do(t, "PATCH", path, e.keyA, `{"url":"https://192.168.1.1/h"}`).wantProblem(t, http.StatusBadRequest, "webhook_url_not_allowed")
	e.do(t, "PATCH", path, e.keyA, `{"events":["nope"]}`).wantProblem(t, http.StatusBadRequest, "invalid_request")
	e.do(t, "GET", "/v1/webhooks/not-a-uuid", e.keyA, nil).wantProblem(t, http.StatusNotFound, "not_found")
	e.do(t, "POST", path+"/deliveries/not-a-uuid/retry", e.keyA, nil).wantProblem(t, http.StatusNotFound, "not_found")
	e.do(t, "POST", path+"/deliveries/"+uuid.NewString()+"/retry", e.keyA, nil).wantProblem(t, http.StatusNotFound, "not_found")

	// Tenant B sees nothing of A's endpoint, and its own bound is its own.
	for _, r := range []struct{ method, path string }{
		{"GET", path}, {"PATCH", path}, {"DELETE", path}, {"POST", path + "/rotate-secret"}, {"GET", path + "/deliveries"},
	} {
		var b any
		if r.method == "PATCH" {
			b = `{"disabled":true}`
		}
		e.do(t, r.method, r.path, e.keyB, b).wantProblem(t, http.StatusNotFound, "not_found")
	}
	var list struct{ Items []hookEndpoint }
	e.do(t, "GET", "/v1/webhooks", e.keyB, nil).want(t, http.StatusOK).json(t, &list)
	if len(list.Items) != 0 {
		t.Fatalf("tenant B lists %+v", list.Items)
	}
	second := map[string]any{"url": "https://hooks.example.com/c", "events": []string{"session.idle"}}
	e.do(t, "POST", "/v1/webhooks", e.keyA, second).want(t, http.StatusCreated)
	p := e.do(t, "POST", "/v1/webhooks", e.keyA, second).wantProblem(t, http.StatusConflict, "too_many_webhooks")
	if !strings.Contains(p.Detail, "at most 2") {
		t.Fatalf("detail %q", p.Detail)
	}
	e.do(t, "POST", "/v1/webhooks", e.keyB, second).want(t, http.StatusCreated)
	e.do(t, "GET", path, e.keyA, nil).want(t, http.StatusOK) // B's requests changed nothing
}

// TestWebhookPrivateEndpointsWhenAllowed: the operator's settings admit http and private hosts.
func TestWebhookPrivateEndpointsWhenAllowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.WebhookAllowHTTP, c.WebhookAllowPrivate = true, true })
	for _, u := range []string{"http://127.0.0.1:9/h", "https://10.0.0.7/h", "http://localhost:8080/h"} {
		e.do(t, "POST", "/v1/webhooks", e.keyA, map[string]any{"url": u, "events": []string{"session.idle"}}).want(t, http.StatusCreated)
	}
	e.do(t, "POST", "/v1/webhooks", e.keyA, `{"url":"ftp://10.0.0.7/h","events":["session.idle"]}`).
		wantProblem(t, http.StatusBadRequest, "webhook_url_not_allowed")
}
