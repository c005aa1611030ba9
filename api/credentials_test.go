package api_test

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/secretbox"
)

// testCredentialKeys is the operator keyring of the api tests' replicas.
var testCredentialKeys = func() *secretbox.Keyring {
	k, err := secretbox.ParseKeyring("test-1:" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")))
	if err != nil {
		panic(err)
	}
	return k
}()

// apiKeyRecord is an API key as the API shows it.
type apiKeyRecord struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix"`
	Scopes     []string   `json:"scopes"`
	CreatedAt  time.Time  `json:"createdAt"`
	LastUsedAt *time.Time `json:"lastUsedAt"`
	ExpiresAt  *time.Time `json:"expiresAt"`
	RevokedAt  *time.Time `json:"revokedAt"`
	Secret     string     `json:"secret"`
}

func TestAPIKeysOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// The tenant-creation response still carries the first key, which lists as "default".
	var tn struct{ ID, APIKey string }
	e.do(t, "POST", "/v1/tenants", adminToken, `{"name":"c"}`).want(t, 201).json(t, &tn)
	var list struct{ Items []apiKeyRecord }
	e.do(t, "GET", "/v1/api-keys", tn.APIKey, nil).want(t, 200).json(t, &list)
	if len(list.Items) != 1 || list.Items[0].Name != "default" || strings.Join(list.Items[0].Scopes, ",") != "keys,read,write" ||
		list.Items[0].Secret != "" || !strings.HasPrefix(tn.APIKey, list.Items[0].Prefix) {
		t.Fatalf("first key %+v", list.Items)
	}

	// Create: 201 with the secret once; the listing never shows it.
	var ro apiKeyRecord
	r := e.do(t, "POST", "/v1/api-keys", e.keyA, `{"name":"dashboards","scopes":["read"]}`).want(t, 201)
	r.json(t, &ro)
	if ro.Secret == "" || ro.Name != "dashboards" || strings.Join(ro.Scopes, ",") != "read" || ro.ExpiresAt != nil ||
		r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("created %+v", ro)
	}
	lr := e.do(t, "GET", "/v1/api-keys", e.keyA, nil).want(t, 200)
	if strings.Contains(string(lr.body), ro.Secret) || strings.Contains(string(lr.body), e.keyA) {
		t.Fatalf("the listing shows a secret: %s", lr.body)
	}
	lr.json(t, &list)
	if len(list.Items) != 2 {
		t.Fatalf("listing %+v", list.Items)
	}
	// The first use is recorded.
	var got apiKeyRecord
	e.do(t, "GET", "/v1/api-keys/"+list.Items[0].ID, e.keyA, nil).want(t, 200).json(t, &got)
	if got.LastUsedAt == nil {
		t.Fatalf("the key in use has no lastUsedAt: %+v", got)
	}

	// A read-only key reads and changes nothing (TestScopesFollowTheRouteList checks every route).
	e.do(t, "GET", "/v1/presets", ro.Secret, nil).want(t, 200)
	e.do(t, "GET", "/v1/api-keys", ro.Secret, nil).want(t, 200)
	e.do(t, "POST", "/v1/api-keys", ro.Secret, `{"name":"escalate"}`).wantProblem(t, http.StatusForbidden, api.CodeInsufficientScope)
	e.do(t, "GET", "/v1/api-keys", e.keyA, nil).want(t, 200).json(t, &list)
	if len(list.Items) != 2 {
		t.Fatalf("a read-only key created a key: %+v", list.Items)
	}

	// Rotate: the same record, a new secret; the old one answers 401 at once.
	var rot apiKeyRecord
	e.do(t, "POST", "/v1/api-keys/"+ro.ID+"/rotate", e.keyA, nil).want(t, 200).json(t, &rot)
	if rot.ID != ro.ID || rot.Name != "dashboards" || rot.Secret == "" || rot.Secret == ro.Secret {
		t.Fatalf("rotated %+v", rot)
	}
	e.do(t, "GET", "/v1/presets", ro.Secret, nil).wantProblem(t, 401, api.CodeUnauthorized)
	e.do(t, "GET", "/v1/presets", rot.Secret, nil).want(t, 200)

	// Revoke: 204 (twice), then 401; another tenant's key and unknown ids are 404.
	e.do(t, "DELETE", "/v1/api-keys/"+ro.ID, e.keyB, nil).wantProblem(t, 404, api.CodeNotFound)
	e.do(t, "POST", "/v1/api-keys/"+ro.ID+"/rotate", e.keyB, nil).wantProblem(t, 404, api.CodeNotFound)
	e.do(t, "GET", "/v1/api-keys/"+ro.ID, e.keyB, nil).wantProblem(t, 404, api.CodeNotFound)
	e.do(t, "GET", "/v1/api-keys/not-a-uuid", e.keyA, nil).wantProblem(t, 404, api.CodeNotFound)
	e.do(t, "DELETE", "/v1/api-keys/"+ro.ID, e.keyA, nil).want(t, 204)
	e.do(t, "DELETE", "/v1/api-keys/"+ro.ID, e.keyA, nil).want(t, 204)
	p := e.do(t, "GET", "/v1/presets", rot.Secret, nil).wantProblem(t, 401, api.CodeUnauthorized)
	if !strings.Contains(p.Detail, "revoked") {
		t.Errorf("revoked detail %q", p.Detail)
	}
	e.do(t, "GET", "/v1/api-keys/"+ro.ID, e.keyA, nil).want(t, 200).json(t, &got)
	if got.RevokedAt == nil {
		t.Fatalf("revoked key %+v", got)
	}
	e.do(t, "POST", "/v1/api-keys/"+ro.ID+"/rotate", e.keyA, nil).wantProblem(t, 404, api.CodeNotFound)

	// Expiry: expiresInSeconds or expiresAt; an expired key answers 401 saying so.
	var exp apiKeyRecord
	e.do(t, "POST", "/v1/api-keys", e.keyA, `{"name":"ci","expiresInSeconds":3600}`).want(t, 201).json(t, &exp)
	if exp.ExpiresAt == nil || time.Until(*exp.ExpiresAt) < 59*time.Minute {
		t.Fatalf("expiry %+v", exp.ExpiresAt)
	}
	at := time.Now().Add(48 * time.Hour).UTC().Format(time.RFC3339)
	e.do(t, "POST", "/v1/api-keys", e.keyA, `{"expiresAt":"`+at+`"}`).want(t, 201)
	e.do(t, "GET", "/v1/presets", exp.Secret, nil).want(t, 200)
	if _, err := e.pool.Exec(t.Context(), `UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1`, exp.ID); err != nil {
		t.Fatal(err)
	}
	p = e.do(t, "GET", "/v1/presets", exp.Secret, nil).wantProblem(t, 401, api.CodeUnauthorized)
	if !strings.Contains(p.Detail, "expired") {
		t.Errorf("expired detail %q", p.Detail)
	}
	e.do(t, "POST", "/v1/api-keys/"+exp.ID+"/rotate", e.keyA, nil).wantProblem(t, 409, api.CodeConflict)

	// Bad bodies.
	for _, body := range []string{`{"scopes":["admin"]}`, `{"expiresInSeconds":0}`, `{"expiresAt":"2001-01-01T00:00:00Z"}`,
		`{"expiresAt":"` + at + `","expiresInSeconds":5}`, `{"name":"` + strings.Repeat("n", 101) + `"}`, `{"secret":"mine"}`,
		`{"expiresAt":"2999-01-01T00:00:00Z"}`} {
		e.do(t, "POST", "/v1/api-keys", e.keyA, body).wantProblem(t, 400, api.CodeInvalidRequest)
	}
}

// credentialRecord is a credential as the API shows it.
type credentialRecord struct {
	ID, Name, Provider string
	CreatedAt          time.Time
}

func TestCredentialsOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const secret = "sk-over-http-0123456789"
	r := e.do(t, "POST", "/v1/credentials", e.keyA, `{"name":"prod","provider":"openai","apiKey":"`+secret+`"}`).want(t, 201)
	if strings.Contains(string(r.body), secret) || strings.Contains(string(r.body), "apiKey") {
		t.Fatalf("the create response shows the key: %s", r.body)
	}
	var c credentialRecord
	r.json(t, &c)
	if c.ID == "" || c.Name != "prod" || c.Provider != "openai" || c.CreatedAt.IsZero() {
		t.Fatalf("created %+v", c)
	}
	for _, path := range []string{"/v1/credentials", "/v1/credentials/" + c.ID} {
		r := e.do(t, "GET", path, e.keyA, nil).want(t, 200)
		if strings.Contains(string(r.body), secret) || !strings.Contains(string(r.body), c.ID) {
			t.Fatalf("GET %s: %s", path, r.body)
		}
	}
	var list struct{ Items []credentialRecord }
	e.do(t, "GET", "/v1/credentials", e.keyB, nil).want(t, 200).json(t, &list)
	if len(list.Items) != 0 {
		t.Fatalf("tenant B sees %+v", list.Items)
	}
	e.do(t, "GET", "/v1/credentials/"+c.ID, e.keyB, nil).wantProblem(t, 404, api.CodeNotFound)
	e.do(t, "DELETE", "/v1/credentials/"+c.ID, e.keyB, nil).wantProblem(t, 404, api.CodeNotFound)
	e.do(t, "GET", "/v1/credentials/nope", e.keyA, nil).wantProblem(t, 404, api.CodeNotFound)
	e.do(t, "POST", "/v1/credentials", e.keyA, `{"name":"prod","provider":"deepseek","apiKey":"other"}`).wantProblem(t, 409, api.CodeConflict)
	for _, body := range []string{`{"name":"x","provider":"anthropic","apiKey":"k-zz"}`, `{"name":"x","provider":"openai"}`,
		`{"provider":"openai","apiKey":"k-zz"}`, `{"name":"a b","provider":"openai","apiKey":"k-zz"}`,
		`{"name":"x","provider":"openai","apiKey":"k-zz","baseUrl":"http://evil"}`} {
		p := e.do(t, "POST", "/v1/credentials", e.keyA, body).wantProblem(t, 400, api.CodeInvalidRequest)
		if strings.Contains(p.Detail, "k-zz") {
			t.Errorf("detail %q echoes the key", p.Detail)
		}
	}

	// A preset names it by name or id; an unknown one, or one of another provider, is refused.
	preset := func(provider, cred string) string {
		return `{"name":"p","model":{"provider":"` + provider + `","model":"m","credential":"` + cred + `"}}`
	}
	e.do(t, "POST", "/v1/presets", e.keyA, preset("openai", "prod")).want(t, 201)
	e.do(t, "POST", "/v1/presets", e.keyA, preset("openai", c.ID)).want(t, 201)
	e.do(t, "POST", "/v1/presets", e.keyB, preset("openai", "prod")).wantProblem(t, 400, api.CodeUnknownCredential)
	e.do(t, "POST", "/v1/presets", e.keyA, preset("openai", "missing")).wantProblem(t, 400, api.CodeUnknownCredential)
	e.do(t, "POST", "/v1/presets", e.keyA, preset("deepseek", "prod")).wantProblem(t, 400, api.CodeInvalidRequest)
	e.do(t, "POST", "/v1/presets", e.keyA, preset("scripted", "prod")).wantProblem(t, 400, api.CodeInvalidRequest)

	e.do(t, "DELETE", "/v1/credentials/"+c.ID, e.keyA, nil).want(t, 204)
	e.do(t, "DELETE", "/v1/credentials/"+c.ID, e.keyA, nil).wantProblem(t, 404, api.CodeNotFound)
	e.do(t, "POST", "/v1/presets", e.keyA, preset("openai", "prod")).wantProblem(t, 400, api.CodeUnknownCredential)

	// Without an operator keyring, storing answers credentials_disabled.
	off := e.newReplica(func(c *api.Config) { c.Credentials = pgstore.NewCredentials(e.pool, nil) })
	p := off.do(t, "POST", "/v1/credentials", e.keyA, `{"name":"x","provider":"openai","apiKey":"k-zz"}`).wantProblem(t, 409, api.CodeCredentialsDisabled)
	if !strings.Contains(p.Detail, "DSHD_CREDENTIAL_KEYS") {
		t.Errorf("disabled detail %q", p.Detail)
	}
	none := e.newReplica(func(c *api.Config) { c.Credentials = nil })
	none.do(t, "GET", "/v1/credentials", e.keyA, nil).wantProblem(t, 409, api.CodeCredentialsDisabled)
}

// TestCredentialTurnsUseTheTenantsKey: each tenant's turn reaches the model with its own key, no
// event shows it, and a deleted credential is not used again: the next turn ends with
// INVALID_CREDENTIAL without a model request.
func TestCredentialTurnsUseTheTenantsKey(t *testing.T) {
	t.Parallel()
	m := mockllm.New(mockllm.Config{})
	ms := httptest.NewServer(m.Handler())
	t.Cleanup(func() { m.Close(); ms.Close() })
	u, _ := url.Parse(ms.URL)
	e := newEnvHosts(t, u.Host)
	keys := map[string]string{e.keyA: "tenant-a-model-key.1", e.keyB: "tenant-b-model-key.2"}
	sids := map[string]string{}
	creds := map[string]string{}
	for apiKey, modelKey := range keys {
		var c credentialRecord
		e.do(t, "POST", "/v1/credentials", apiKey, `{"name":"mine","provider":"openai","apiKey":"`+modelKey+`"}`).want(t, 201).json(t, &c)
		creds[apiKey] = c.ID
		sids[apiKey] = e.sessionOfPreset(t, apiKey,
			`{"name":"mock","model":{"provider":"openai","model":"mock","baseUrl":"`+ms.URL+`","credential":"mine"}}`)
	}
	for apiKey, modelKey := range keys {
		evs := postStream(t, e.replica, sids[apiKey], apiKey, `{"content":"say:for%20`+modelKey[:8]+`"}`).untilEnd(t)
		last := evs[len(evs)-1]
		if last.Type != "turn/end" || !strings.Contains(string(last.Data), `"completed"`) {
			t.Fatalf("turn ended %s", last.Data)
		}
		for _, ev := range evs {
			for _, k := range keys {
				if strings.Contains(string(ev.Data), k) {
					t.Fatalf("event %s shows a model key: %s", ev.Type, ev.Data)
				}
			}
		}
	}
	calls := m.Calls()
	if len(calls) != 2 {
		t.Fatalf("%d model calls, want 2", len(calls))
	}
	for _, c := range calls {
		text := string(c.Body)
		matched := false
		for _, modelKey := range keys {
			if strings.Contains(text, "say:for%20"+modelKey[:8]) {
				matched = true
				if c.Authorization != "Bearer "+modelKey {
					t.Errorf("the turn of %s reached the model with %q", modelKey[:8], c.Authorization)
				}
			}
		}
		if !matched {
			t.Errorf("a model call of no test turn: %s", text)
		}
	}

	// Delete tenant A's credential: its next turn ends with INVALID_CREDENTIAL, no model call.
	e.do(t, "DELETE", "/v1/credentials/"+creds[e.keyA], e.keyA, nil).want(t, 204)
	m.Reset()
	evs := postStream(t, e.replica, sids[e.keyA], e.keyA, `{"content":"text"}`).untilEnd(t)
	last := evs[len(evs)-1]
	if last.Type != eventlog.TypeTurnEnd || !strings.Contains(string(last.Data), "INVALID_CREDENTIAL") {
		t.Fatalf("turn after delete ended %s", last.Data)
	}
	if n := len(m.Calls()); n != 0 {
		t.Fatalf("%d model calls after the credential was deleted", n)
	}
}

func init() { contractExtras = append(contractExtras, credentialsContract) }

// credentialsContract checks the API key and credential operations against openapi.yaml.
func credentialsContract(t *testing.T, e *env, c *contract, _, _ string) {
	var k apiKeyRecord
	c.check("POST", "/v1/api-keys", e.do(t, "POST", "/v1/api-keys", e.keyA, `{"name":"ro","scopes":["read"],"expiresInSeconds":60}`).want(t, 201)).json(t, &k)
	c.check("POST", "/v1/api-keys", e.do(t, "POST", "/v1/api-keys", e.keyA, `{"scopes":["root"]}`).want(t, 400))
	c.check("POST", "/v1/api-keys", e.do(t, "POST", "/v1/api-keys", k.Secret, `{}`).want(t, 403))
	c.check("POST", "/v1/api-keys", e.do(t, "POST", "/v1/api-keys", e.keyA, `{"scopes":["admin"]}`).want(t, 400))
	var pr struct{ ID string }
	e.do(t, "POST", "/v1/presets", e.keyA, minimalPreset).want(t, 201).json(t, &pr)
	c.check("GET", "/v1/presets/{id}/webhook-secret", e.do(t, "GET", "/v1/presets/"+pr.ID+"/webhook-secret", k.Secret, nil).want(t, 403))
	c.check("GET", "/v1/api-keys", e.do(t, "GET", "/v1/api-keys", k.Secret, nil).want(t, 200))
	c.check("GET", "/v1/api-keys/{id}", e.do(t, "GET", "/v1/api-keys/"+k.ID, e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/api-keys/{id}", e.do(t, "GET", "/v1/api-keys/"+k.ID, e.keyB, nil).want(t, 404))
	c.check("POST", "/v1/api-keys/{id}/rotate", e.do(t, "POST", "/v1/api-keys/"+k.ID+"/rotate", e.keyA, nil).want(t, 200))
	c.check("POST", "/v1/api-keys/{id}/rotate", e.do(t, "POST", "/v1/api-keys/"+k.ID+"/rotate", e.keyB, nil).want(t, 404))
	c.check("DELETE", "/v1/api-keys/{id}", e.do(t, "DELETE", "/v1/api-keys/"+k.ID, e.keyA, nil).want(t, 204))
	c.check("DELETE", "/v1/api-keys/{id}", e.do(t, "DELETE", "/v1/api-keys/"+k.ID, e.keyB, nil).want(t, 404))

	var cr credentialRecord
	c.check("POST", "/v1/credentials", e.do(t, "POST", "/v1/credentials", e.keyA, `{"name":"c1","provider":"deepseek","apiKey":"sk-contract"}`).want(t, 201)).json(t, &cr)
	c.check("POST", "/v1/credentials", e.do(t, "POST", "/v1/credentials", e.keyA, `{"name":"c1","provider":"deepseek","apiKey":"sk-contract"}`).want(t, 409))
	c.check("POST", "/v1/credentials", e.do(t, "POST", "/v1/credentials", e.keyA, `{"name":"c2","provider":"x","apiKey":"k"}`).want(t, 400))
	c.check("GET", "/v1/credentials", e.do(t, "GET", "/v1/credentials", e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/credentials/{id}", e.do(t, "GET", "/v1/credentials/"+cr.ID, e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/credentials/{id}", e.do(t, "GET", "/v1/credentials/"+cr.ID, e.keyB, nil).want(t, 404))
	c.check("POST", "/v1/presets", e.do(t, "POST", "/v1/presets", e.keyA, `{"name":"p","model":{"model":"m","credential":"c1"}}`).want(t, 201))
	c.check("POST", "/v1/presets", e.do(t, "POST", "/v1/presets", e.keyA, `{"name":"p","model":{"model":"m","credential":"c9"}}`).want(t, 400))
	c.check("DELETE", "/v1/credentials/{id}", e.do(t, "DELETE", "/v1/credentials/"+cr.ID, e.keyA, nil).want(t, 204))
	c.check("DELETE", "/v1/credentials/{id}", e.do(t, "DELETE", "/v1/credentials/"+cr.ID, e.keyA, nil).want(t, 404))
}
