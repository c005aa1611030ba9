package api_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dshd/dshd/api"
)

// TestProblemNamesEachField: an invalid request's problem names each value at fault in errors,
// a JSON Pointer into the body (or #/query/<name>, #/header/<name>), beside the one-line detail
// and the code clients already read.
func TestProblemNamesEachField(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.WebhookAllowHTTP, c.WebhookAllowPrivate = true, true })
	sid := e.sessionCreate(t, e.keyA)
	for _, c := range []struct {
		name, method, path, bearer, body string
		headers                          []string
		status                           int
		code                             string
		pointers                         []string
	}{
		{name: "preset with three bad fields", method: "POST", path: "/v1/presets", bearer: e.keyA,
			body:   `{"name":"","model":{"provider":"nope","model":"m"},"tools":{"allow":["a","b"," "]}}`,
			status: 400, code: api.CodeInvalidRequest, pointers: []string{"/name", "/model/provider", "/tools/allow/2"}},
		{name: "preset sections and limits", method: "POST", path: "/v1/presets", bearer: e.keyA,
			body:   `{"name":"p","model":{"provider":"scripted","model":"default"},"prompt":{"sections":[{"name":"a"}]},"limits":{"maxSteps":0}}`,
			status: 400, code: api.CodeInvalidRequest, pointers: []string{"/prompt/sections/0/order", "/limits/maxSteps"}},
		{name: "preset of the wrong type", method: "POST", path: "/v1/presets", bearer: e.keyA,
			body:   `{"name":"p","model":{"provider":"scripted","model":"default","maxTokens":"many"}}`,
			status: 400, code: api.CodeInvalidRequest, pointers: []string{"/model/maxTokens"}},
		{name: "webhook with three bad fields", method: "POST", path: "/v1/webhooks", bearer: e.keyA,
			body:   `{"url":"","events":["session.idle","nope"],"description":"` + strings.Repeat("d", 5000) + `"}`,
			status: 400, code: api.CodeInvalidRequest, pointers: []string{"/events/1", "/url", "/description"}},
		{name: "webhook url not allowed", method: "POST", path: "/v1/webhooks", bearer: e.keyA,
			body:   `{"url":"ftp://10.0.0.7/h","events":["session.idle"]}`,
			status: 400, code: api.CodeWebhookURLNotAllowed, pointers: []string{"/url"}},
		{name: "session without preset", method: "POST", path: "/v1/sessions", bearer: e.keyA, body: `{}`,
			status: 400, code: api.CodeInvalidRequest, pointers: []string{"/presetId"}},
		{name: "fork boundary", method: "POST", path: "/v1/sessions", bearer: e.keyA,
			body:   fmt.Sprintf(`{"fork":{"sessionId":%q,"boundarySeq":99999}}`, sid),
			status: 400, code: api.CodeInvalidBoundary, pointers: []string{"/fork/boundarySeq"}},
		{name: "approval outcome", method: "POST", path: "/v1/sessions/" + sid.String() + "/approvals/a1", bearer: e.keyA,
			body: `{"outcome":"maybe"}`, status: 400, code: api.CodeInvalidRequest, pointers: []string{"/outcome"}},
		{name: "message mode", method: "POST", path: "/v1/sessions/" + sid.String() + "/messages", bearer: e.keyA,
			body: `{"content":"hi","mode":"shout"}`, status: 400, code: api.CodeInvalidRequest, pointers: []string{"/mode"}},
		{name: "api key lifetime", method: "POST", path: "/v1/api-keys", bearer: e.keyA, body: `{"name":"k","expiresInSeconds":0}`,
			status: 400, code: api.CodeInvalidRequest, pointers: []string{"/expiresInSeconds"}},
		{name: "api key name", method: "POST", path: "/v1/api-keys", bearer: e.keyA, body: `{"name":"` + strings.Repeat("n", 300) + `"}`,
			status: 400, code: api.CodeInvalidRequest, pointers: []string{"/name"}},
		{name: "api key scope", method: "POST", path: "/v1/api-keys", bearer: e.keyA, body: `{"name":"k","scopes":["root"]}`,
			status: 400, code: api.CodeInvalidRequest, pointers: []string{"/scopes"}},
		{name: "credential provider", method: "POST", path: "/v1/credentials", bearer: e.keyA,
			body: `{"name":"c","provider":"anthropic","apiKey":"k"}`, status: 400, code: api.CodeInvalidRequest, pointers: []string{"/provider"}},
		{name: "tool result", method: "POST", path: "/v1/sessions/" + sid.String() + "/tool-results", bearer: e.keyA,
			body: `{"callId":"","content":"x"}`, status: 400, code: api.CodeInvalidRequest, pointers: []string{"/callId"}},
		{name: "approval policy", method: "PUT", path: "/v1/sessions/" + sid.String() + "/approval-policy", bearer: e.keyA,
			body: `{"policy":"always"}`, status: 400, code: api.CodeInvalidRequest, pointers: []string{"/policy"}},
		{name: "tenant limits", method: "PUT", path: "/v1/tenants/" + e.tenantA.String() + "/limits", bearer: adminToken,
			body: `{"burst":0}`, status: 400, code: api.CodeInvalidRequest, pointers: []string{"/burst"}},
		{name: "tenant name", method: "POST", path: "/v1/tenants", bearer: adminToken, body: `{"name":""}`,
			status: 400, code: api.CodeInvalidRequest, pointers: []string{"/name"}},
		{name: "query parameter", method: "GET", path: "/v1/presets?limit=0", bearer: e.keyA,
			status: 400, code: api.CodeInvalidRequest, pointers: []string{"#/query/limit"}},
		{name: "header", method: "POST", path: "/v1/presets", bearer: e.keyA, body: minimalPreset,
			headers: []string{"Idempotency-Key", strings.Repeat("k", 256)},
			status:  400, code: api.CodeInvalidRequest, pointers: []string{"#/header/Idempotency-Key"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var body any
			if c.body != "" {
				body = c.body
			}
			p := e.do(t, c.method, c.path, c.bearer, body, c.headers...).wantProblem(t, c.status, c.code)
			var got []string
			for _, f := range p.Errors {
				if f.Detail == "" {
					t.Fatalf("an entry without detail: %+v", p.Errors)
				}
				got = append(got, f.Pointer)
			}
			if !slices.Equal(got, c.pointers) {
				t.Fatalf("pointers %q, want %q; problem %+v", got, c.pointers, p)
			}
		})
	}
	// A problem about no one field has no errors.
	p := e.do(t, "POST", "/v1/presets", e.keyA, `{"name":"p"`).wantProblem(t, 400, api.CodeInvalidRequest)
	if p.Errors != nil {
		t.Fatalf("malformed JSON names fields: %+v", p)
	}
}
