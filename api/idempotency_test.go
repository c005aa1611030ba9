package api_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/dshd/dshd/api"
)

// idemCreate is one create an Idempotency-Key covers, for TestIdempotentCreates.
type idemCreate struct {
	name    string
	path    string
	spec    string // the operation's path in openapi.yaml, when it is not path
	bearer  string
	body    func(n int) string // body(n): the n-th distinct request
	count   string             // SQL counting the created resources ($1: tenant A)
	secrets []string           // fields of the answer a replay omits
}

// TestIdempotentCreates: on every POST that creates, the same Idempotency-Key with the same body
// answers the first answer (status and body, without the secret it carried once) and creates
// nothing more; with another body, 409 idempotency_conflict; concurrent requests with one key
// create one resource; another tenant's key of the same name is its own.
func TestIdempotentCreates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.WebhookAllowHTTP, c.WebhookAllowPrivate = true, true })
	pid := e.presetCreate(t, e.keyA, minimalPreset)
	sid := e.sessionCreate(t, e.keyA)
	importText := jsonl(t, referenceLogs(t)["text.jsonl"])
	creates := []idemCreate{
		{name: "session", path: "/v1/sessions", bearer: e.keyA,
			body:  func(n int) string { return fmt.Sprintf(`{"presetId":%q}`, pid) + strings.Repeat(" ", n) },
			count: `SELECT count(*) FROM sessions WHERE tenant_id = $1`},
		{name: "fork", path: "/v1/sessions", bearer: e.keyA,
			body:  func(n int) string { return fmt.Sprintf(`{"fork":{"sessionId":%q}}`, sid) + strings.Repeat(" ", n) },
			count: `SELECT count(*) FROM sessions WHERE tenant_id = $1`},
		{name: "preset", path: "/v1/presets", bearer: e.keyA,
			body: func(n int) string {
				return fmt.Sprintf(`{"name":"p%d","model":{"provider":"scripted","model":"default"}}`, n)
			},
			count: `SELECT count(*) FROM presets WHERE tenant_id = $1`},
		{name: "api key", path: "/v1/api-keys", bearer: e.keyA,
			body:    func(n int) string { return fmt.Sprintf(`{"name":"k%d","scopes":["read"]}`, n) },
			count:   `SELECT count(*) FROM api_keys WHERE tenant_id = $1`,
			secrets: []string{"secret"}},
		{name: "credential", path: "/v1/credentials", bearer: e.keyA,
			body:  func(n int) string { return fmt.Sprintf(`{"name":"c%d","provider":"openai","apiKey":"sk-%d"}`, n, n) },
			count: `SELECT count(*) FROM credentials WHERE tenant_id = $1`},
		{name: "webhook", path: "/v1/webhooks", bearer: e.keyA,
			body: func(n int) string {
				return fmt.Sprintf(`{"url":"http://127.0.0.1:9/h%d","events":["session.idle"]}`, n)
			},
			count:   `SELECT count(*) FROM webhook_endpoints WHERE tenant_id = $1`,
			secrets: []string{"secret"}},
		{name: "stream token", path: "/v1/sessions/" + sid.String() + "/stream-tokens", spec: "/v1/sessions/{id}/stream-tokens", bearer: e.keyA,
			body:    func(n int) string { return strings.Repeat(" ", n) + "{}" },
			secrets: []string{"token", "streamUrl"}},
		{name: "import", path: "/v1/sessions/import?preset=" + pid.String(), spec: "/v1/sessions/import", bearer: e.keyA,
			body:  func(n int) string { return string(importText) + strings.Repeat(" ", n) },
			count: `SELECT count(*) FROM sessions WHERE tenant_id = $1`},
		{name: "tenant", path: "/v1/tenants", bearer: adminToken,
			body:    func(n int) string { return fmt.Sprintf(`{"name":"idem-%d"}`, n) },
			count:   `SELECT count(*) FROM tenants WHERE name LIKE 'idem-%' AND $1::uuid IS NOT NULL`,
			secrets: []string{"apiKey"}},
	}
	for _, c := range creates {
		t.Run(c.name, func(t *testing.T) {
			n := func() int {
				t.Helper()
				if c.count == "" {
					return 0
				}
				var n int
				if err := e.pool.QueryRow(context.Background(), c.count, e.tenantA).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			before := n()
			key := "idem-" + c.name
			first := e.do(t, "POST", c.path, c.bearer, c.body(0), "Idempotency-Key", key).want(t, http.StatusCreated)
			var firstObj map[string]any
			first.json(t, &firstObj)
			for _, s := range c.secrets {
				if firstObj[s] == nil || firstObj[s] == "" {
					t.Fatalf("the first answer has no %s: %s", s, first.body)
				}
			}
			replay := e.do(t, "POST", c.path, c.bearer, c.body(0), "Idempotency-Key", key).want(t, http.StatusCreated)
			if replay.header.Get("Idempotent-Replayed") != "true" || first.header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("Idempotent-Replayed %q then %q", first.header.Get("Idempotent-Replayed"), replay.header.Get("Idempotent-Replayed"))
			}
			if loc := first.header.Get("Location"); replay.header.Get("Location") != loc {
				t.Fatalf("the replay's Location is %q, the first answer's %q", replay.header.Get("Location"), loc)
			}
			// Both answers are what the contract says a create answers, the replay without its secret.
			spec := cmp.Or(c.spec, c.path)
			contract := loadContract(t)
			contract.check("POST", spec, first)
			contract.check("POST", spec, replay)
			var replayObj map[string]any
			replay.json(t, &replayObj)
			for k, v := range firstObj {
				secret := false
				for _, s := range c.secrets {
					secret = secret || s == k
				}
				if secret {
					if _, ok := replayObj[k]; ok {
						t.Fatalf("the replay shows %s: %s", k, replay.body)
					}
					if str, ok := v.(string); ok && bytes.Contains(replay.body, []byte(str)) {
						t.Fatalf("the replay carries the secret %s: %s", k, replay.body)
					}
					continue
				}
				if fmt.Sprint(replayObj[k]) != fmt.Sprint(v) {
					t.Fatalf("replay %s = %v, first %v", k, replayObj[k], v)
				}
			}
			if c.count != "" && n() != before+1 {
				t.Fatalf("%d resources after a create and its replay, want %d", n(), before+1)
			}
			// Another request with the key: conflict, nothing created.
			e.do(t, "POST", c.path, c.bearer, c.body(1), "Idempotency-Key", key).wantProblem(t, http.StatusConflict, api.CodeIdempotencyConflict)
			// Without a key, or with another, it creates.
			e.do(t, "POST", c.path, c.bearer, c.body(2), "Idempotency-Key", key+"-2").want(t, http.StatusCreated)
			if c.count != "" && n() != before+2 {
				t.Fatalf("%d resources, want %d", n(), before+2)
			}

			// Concurrent duplicates: one create, every answer the same resource.
			const parallel = 6
			cbody := c.body(3)
			var wg sync.WaitGroup
			answers := make([]string, parallel)
			errs := make([]error, parallel)
			for i := range parallel {
				wg.Add(1)
				go func() {
					defer wg.Done()
					answers[i], errs[i] = postRaw(e.url+c.path, c.bearer, cbody, key+"-concurrent")
				}()
			}
			wg.Wait()
			ids := map[string]bool{}
			for i, a := range answers {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				var obj map[string]any
				if err := json.Unmarshal([]byte(a), &obj); err != nil {
					t.Fatalf("answer %s: %v", a, err)
				}
				ids[fmt.Sprint(obj["id"], obj["expiresAt"])] = true
			}
			if len(ids) != 1 {
				t.Fatalf("concurrent duplicates answered %d resources: %v", len(ids), answers)
			}
			if c.count != "" && n() != before+3 {
				t.Fatalf("%d resources after concurrent duplicates, want %d", n(), before+3)
			}
		})
	}

	// Keys are the tenant's: tenant B's key of the same name creates its own preset.
	body := `{"name":"shared","model":{"provider":"scripted","model":"default"}}`
	var a, b struct{ ID string }
	e.do(t, "POST", "/v1/presets", e.keyA, body, "Idempotency-Key", "shared").want(t, 201).json(t, &a)
	e.do(t, "POST", "/v1/presets", e.keyB, body, "Idempotency-Key", "shared").want(t, 201).json(t, &b)
	if a.ID == b.ID || a.ID == "" {
		t.Fatalf("tenants A and B share a preset %s/%s", a.ID, b.ID)
	}
	// Per route: the key of a preset create does not replay on the webhook create.
	e.do(t, "POST", "/v1/webhooks", e.keyA, `{"url":"http://127.0.0.1:9/shared","events":["session.idle"]}`,
		"Idempotency-Key", "shared").want(t, 201)
	// A failed create records nothing: the key creates once the request is fixed... with the
	// same body, which failed, it fails again rather than replaying.
	e.do(t, "POST", "/v1/presets", e.keyA, `{"name":""}`, "Idempotency-Key", "failing").want(t, 400)
	e.do(t, "POST", "/v1/presets", e.keyA, `{"name":""}`, "Idempotency-Key", "failing").want(t, 400)
	e.do(t, "POST", "/v1/presets", e.keyA, body, "Idempotency-Key", strings.Repeat("k", 256)).wantProblem(t, 400, api.CodeInvalidRequest)
}

// postRaw posts body with an Idempotency-Key and answers the body of a 201.
func postRaw(url, bearer, body, key string) (string, error) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := harnessClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, data)
	}
	return string(data), nil
}

// TestIdempotentKeyCreatesArePerCallerKey: a key minted through POST /v1/api-keys is its caller's
// child, capped to its scopes, so the same Idempotency-Key and body from another key of the
// tenant creates its own key instead of replaying the first caller's.
func TestIdempotentKeyCreatesArePerCallerKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	other := e.mintKey(t, e.keyA, "other")
	body := `{"name":"child","scopes":["read"]}`
	var a, b, again struct{ ID, ParentID string }
	e.do(t, "POST", "/v1/api-keys", e.keyA, body, "Idempotency-Key", "same").want(t, http.StatusCreated).json(t, &a)
	replay := e.do(t, "POST", "/v1/api-keys", other.Secret, body, "Idempotency-Key", "same").want(t, http.StatusCreated)
	replay.json(t, &b)
	if b.ID == a.ID || replay.header.Get("Idempotent-Replayed") != "" || b.ParentID != other.ID {
		t.Fatalf("another key's create with the same Idempotency-Key: %+v (replayed %q), the first %+v", b, replay.header.Get("Idempotent-Replayed"), a)
	}
	e.do(t, "POST", "/v1/api-keys", e.keyA, body, "Idempotency-Key", "same").want(t, http.StatusCreated).json(t, &again)
	if again.ID != a.ID {
		t.Fatalf("the first key's retry created %s, want the replay of %s", again.ID, a.ID)
	}
}
