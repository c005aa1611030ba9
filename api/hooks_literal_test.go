package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// nonCanonicalLoopback are hosts that name 127.0.0.1 (or another address that is not public) in a
// form other than the dotted quad: resolvers that follow inet_aton dial them there.
var nonCanonicalLoopback = []string{"127.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.0.0.01", "0xa9fea9fe"}

// TestWebhookRegistrationRefusesNonCanonicalIPv4 (issue 17, finding 5): tenant webhook
// registration accepted https://127.1/ and https://2130706433/ while it refused
// https://127.0.0.1/. Every form is now refused, with the same problem as the dotted quad
// (400 webhook_url_not_allowed, "not a public address"), on create and on update.
func TestWebhookRegistrationRefusesNonCanonicalIPv4(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var hook struct{ ID string }
	e.do(t, "POST", "/v1/webhooks", e.keyA, `{"url":"https://hooks.example.com/h","events":["session.idle"]}`).
		want(t, http.StatusCreated).json(t, &hook)
	for _, host := range nonCanonicalLoopback {
		body := `{"url":"https://` + host + `:8443/h","events":["session.idle"]}`
		p := e.do(t, "POST", "/v1/webhooks", e.keyA, body).wantProblem(t, http.StatusBadRequest, "webhook_url_not_allowed")
		if !strings.Contains(p.Detail, "not a public address") {
			t.Errorf("create %s: detail %q", host, p.Detail)
		}
		e.do(t, "PATCH", "/v1/webhooks/"+hook.ID, e.keyA, `{"url":"https://`+host+`/h"}`).
			wantProblem(t, http.StatusBadRequest, "webhook_url_not_allowed")
	}
}

// TestPolicyWebhookRegistrationRefusesNonCanonicalIPv4 (issue 17, finding 5): a preset's policy
// webhooks took the same non-canonical IPv4 forms; the preset write now refuses them as it refuses
// a loopback dotted quad (400 invalid_request naming the field, "not a public address").
func TestPolicyWebhookRegistrationRefusesNonCanonicalIPv4(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, host := range append([]string{"127.0.0.1"}, nonCanonicalLoopback...) {
		for _, field := range []string{"preExecute", "postExecute"} {
			b := `{"name":"p","model":{"provider":"scripted","model":"m"},"policies":{"webhooks":{"` + field +
				`":"https://` + host + `/hook"}}}`
			p := e.do(t, "POST", "/v1/presets", e.keyA, b).wantProblem(t, http.StatusBadRequest, "invalid_request")
			if !strings.Contains(p.Detail, "policies.webhooks."+field) || !strings.Contains(p.Detail, "not a public address") {
				t.Errorf("%s %s: detail %q", field, host, p.Detail)
			}
		}
	}
}
