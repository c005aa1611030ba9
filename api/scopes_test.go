package api_test

import (
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/api"
)

// readAllowed are the requests other than GET and HEAD that a read-only key may make.
var readAllowed = []string{"POST /v1/sessions/{id}/stream-tokens"}

// readDenied are the GET requests a read-only key may not make: they show a secret.
var readDenied = []string{"GET /v1/presets/{id}/webhook-secret"}

// noAPIKey are the routes that do not take an API key at all (public, or the admin token's:
// everything under /v1/tenants).
var noAPIKey = []string{"GET /", "GET /healthz", "GET /readyz", "GET /metrics", "GET /openapi.yaml"}

var routeParam = regexp.MustCompile(`\{[^}]+\}`)

// TestScopesFollowTheRouteList sends every route the router serves (Server.Routes, so a route
// added later is covered too) with a read-only key, a read-write key without the keys scope and a
// key with every scope: the read-only key is refused everything but GET and HEAD (minus readDenied)
// and readAllowed; the read-write key is refused only the writes of /v1/api-keys; no route refuses
// the full key for its scope. A refused request never reaches its handler (403 before anything).
func TestScopesFollowTheRouteList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.Heartbeat = time.Hour })
	var ro, rw apiKeyRecord
	e.do(t, "POST", "/v1/api-keys", e.keyA, `{"name":"ro","scopes":["read"]}`).want(t, 201).json(t, &ro)
	e.do(t, "POST", "/v1/api-keys", e.keyA, `{"name":"rw"}`).want(t, 201).json(t, &rw)
	if strings.Join(rw.Scopes, ",") != "read,write" {
		t.Fatalf("a new key's default scopes %v, want read and write", rw.Scopes)
	}
	const id = "9b2c2d8e-0f6a-4c1e-9a57-3c1f1c1d2e3f" // of nothing: a request that gets through finds nothing
	checked := 0
	for _, route := range e.api.Routes() {
		method, pattern, _ := strings.Cut(route, " ")
		if slices.Contains(noAPIKey, route) || pattern == "/v1/tenants" || strings.HasPrefix(pattern, "/v1/tenants/") {
			continue
		}
		path := routeParam.ReplaceAllString(pattern, id)
		var body any
		if method != http.MethodGet && method != http.MethodHead && method != http.MethodDelete {
			body = `{}`
		}
		reads := method == http.MethodGet || method == http.MethodHead
		readOK := (reads && !slices.Contains(readDenied, route)) || slices.Contains(readAllowed, route)
		keysRoute := !reads && strings.HasPrefix(pattern, "/v1/api-keys")
		for _, k := range []struct {
			name, secret, scope string
			allowed             bool
		}{
			{"read-only", ro.Secret, "write", readOK},
			{"read-write", rw.Secret, "keys", !keysRoute},
			{"full", e.keyA, "", true},
		} {
			if method == http.MethodDelete && k.name == "full" && strings.HasPrefix(pattern, "/v1/api-keys") {
				continue // the full key would revoke nothing, but keep the test's keys out of the way
			}
			r := e.do(t, method, path, k.secret, body)
			refused := r.status == http.StatusForbidden && strings.Contains(string(r.body), api.CodeInsufficientScope)
			switch {
			case k.allowed && refused:
				t.Errorf("%s: the %s key is refused: %s", route, k.name, r.body)
			case !k.allowed && !refused:
				t.Errorf("%s: the %s key got %d, want 403 insufficient_scope: %s", route, k.name, r.status, r.body)
			case !k.allowed && !strings.Contains(r.header.Get("WWW-Authenticate"), `scope="`):
				t.Errorf("%s: WWW-Authenticate %q names no scope", route, r.header.Get("WWW-Authenticate"))
			}
		}
		checked++
	}
	if checked < 20 {
		t.Fatalf("only %d routes checked", checked)
	}
	// The webhook secret is refused to the read-only key but not to a read-write one, and the
	// stream-token POST is the read-only key's (checked with real ids, not only the route).
	var pr, sess struct{ ID string }
	e.do(t, "POST", "/v1/presets", e.keyA, minimalPreset).want(t, 201).json(t, &pr)
	e.do(t, "POST", "/v1/sessions", e.keyA, `{"presetId":"`+pr.ID+`"}`).want(t, 201).json(t, &sess)
	e.do(t, "POST", "/v1/sessions/"+sess.ID+"/stream-tokens", ro.Secret, `{}`).want(t, 201)
	e.do(t, "GET", "/v1/presets/"+pr.ID+"/webhook-secret", ro.Secret, nil).wantProblem(t, 403, api.CodeInsufficientScope)
	if r := e.do(t, "GET", "/v1/presets/"+pr.ID+"/webhook-secret", rw.Secret, nil); r.status == 403 {
		t.Fatalf("the read-write key cannot read the webhook secret: %s", r.body)
	}
}

// TestKeyManagementIsCapped: only a key with the keys scope manages keys, and it hands out no
// scope and no lifetime beyond its own: a key it creates expires when it does by default, and it
// cannot rotate (take over) a key of wider scopes or a longer life. It may revoke any key.
func TestKeyManagementIsCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mgr apiKeyRecord
	e.do(t, "POST", "/v1/api-keys", e.keyA, `{"name":"mgr","scopes":["read","keys"],"expiresInSeconds":3600}`).want(t, 201).json(t, &mgr)
	if strings.Join(mgr.Scopes, ",") != "keys,read" || mgr.ExpiresAt == nil {
		t.Fatalf("manager key %+v", mgr)
	}
	var child apiKeyRecord
	e.do(t, "POST", "/v1/api-keys", mgr.Secret, `{"name":"child"}`).want(t, 201).json(t, &child)
	if strings.Join(child.Scopes, ",") != "read" || child.ExpiresAt == nil || !child.ExpiresAt.Equal(*mgr.ExpiresAt) {
		t.Fatalf("child %+v: want read only, expiring with its creator at %v", child, mgr.ExpiresAt)
	}
	for _, body := range []string{`{"scopes":["write"]}`, `{"scopes":["read","keys","write"]}`,
		`{"expiresInSeconds":7200}`, `{"expiresAt":"` + time.Now().Add(48*time.Hour).UTC().Format(time.RFC3339) + `"}`} {
		e.do(t, "POST", "/v1/api-keys", mgr.Secret, body).wantProblem(t, 403, api.CodeInsufficientScope)
	}
	e.do(t, "POST", "/v1/api-keys", mgr.Secret, `{"scopes":["keys"],"expiresInSeconds":60}`).want(t, 201)

	// Rotation: its own and its child's, not the tenant's first key (never expires, writes).
	var list struct{ Items []apiKeyRecord }
	e.do(t, "GET", "/v1/api-keys", e.keyA, nil).want(t, 200).json(t, &list)
	first := list.Items[0]
	e.do(t, "POST", "/v1/api-keys/"+first.ID+"/rotate", mgr.Secret, nil).wantProblem(t, 403, api.CodeInsufficientScope)
	e.do(t, "GET", "/v1/presets", e.keyA, nil).want(t, 200) // not rotated
	e.do(t, "POST", "/v1/api-keys/"+child.ID+"/rotate", mgr.Secret, nil).want(t, 200)
	var rot apiKeyRecord
	e.do(t, "POST", "/v1/api-keys/"+mgr.ID+"/rotate", mgr.Secret, nil).want(t, 200).json(t, &rot)

	// A key without the keys scope (the default) manages no key, not even itself.
	var rw apiKeyRecord
	e.do(t, "POST", "/v1/api-keys", e.keyA, `{"name":"rw"}`).want(t, 201).json(t, &rw)
	e.do(t, "POST", "/v1/api-keys", rw.Secret, `{}`).wantProblem(t, 403, api.CodeInsufficientScope)
	e.do(t, "POST", "/v1/api-keys/"+rw.ID+"/rotate", rw.Secret, nil).wantProblem(t, 403, api.CodeInsufficientScope)
	e.do(t, "DELETE", "/v1/api-keys/"+rw.ID, rw.Secret, nil).wantProblem(t, 403, api.CodeInsufficientScope)

	// Revocation is the safety valve: any key with the keys scope revokes any key of the tenant.
	e.do(t, "DELETE", "/v1/api-keys/"+rw.ID, rot.Secret, nil).want(t, 204)
	e.do(t, "GET", "/v1/presets", rw.Secret, nil).wantProblem(t, 401, api.CodeUnauthorized)
}

// TestStreamEndsWhenItsKeyGoes: an event stream opened with an API key, or with a stream token
// the key minted, ends within a heartbeat of the key's revocation (and of a rotation, and of its
// expiry), on this replica and on another; a reconnect with the key or the token answers 401.
// Streams of other keys go on.
func TestStreamEndsWhenItsKeyGoes(t *testing.T) {
	t.Parallel()
	hb := func(c *api.Config) {
		c.Heartbeat, c.StreamTokenSecret = 50*time.Millisecond, []byte("shared-stream-token-secret")
	}
	e := newEnv(t, hb)
	other := e.newReplica(hb)
	sid := e.sessionCreate(t, e.keyA)
	for _, tc := range []struct {
		name string
		end  func(k apiKeyRecord)
	}{
		{"revoked", func(k apiKeyRecord) { e.do(t, "DELETE", "/v1/api-keys/"+k.ID, e.keyA, nil).want(t, 204) }},
		{"rotated", func(k apiKeyRecord) { e.do(t, "POST", "/v1/api-keys/"+k.ID+"/rotate", e.keyA, nil).want(t, 200) }},
		{"expired", func(k apiKeyRecord) {
			if _, err := e.pool.Exec(t.Context(), `UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1`, k.ID); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		var k apiKeyRecord
		e.do(t, "POST", "/v1/api-keys", e.keyA, `{"name":"`+tc.name+`","scopes":["read"]}`).want(t, 201).json(t, &k)
		here := openStream(t, e.url+"/v1/sessions/"+sid.String()+"/events", k.Secret)
		there := openStream(t, other.url+"/v1/sessions/"+sid.String()+"/events", k.Secret)
		token := e.streamToken(t, k.Secret, sid)
		byToken := tokenStream(t, other, sid, token)
		stays := openStream(t, e.url+"/v1/sessions/"+sid.String()+"/events", e.keyA)
		tc.end(k)
		for _, s := range []*rawStream{here, there, byToken} {
			waitStreamEnd(t, s, tc.name)
		}
		// The key's unexpired stream token opens nothing any more.
		r := e.do(t, "GET", "/v1/sessions/"+sid.String()+"/events?token="+token, "", nil, "Accept", "text/event-stream")
		if p := r.wantProblem(t, 401, api.CodeUnauthorized); !strings.Contains(p.Detail, "minted") {
			t.Errorf("%s: token refused with %q", tc.name, p.Detail)
		}
		select {
		case f, ok := <-stays.frames:
			if !ok {
				t.Fatalf("%s: the stream of another key ended", tc.name)
			}
			_ = f // a heartbeat: it goes on
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the stream of another key sends nothing", tc.name)
		}
		e.do(t, "GET", "/v1/sessions/"+sid.String()+"/events", k.Secret, nil, "Accept", "text/event-stream").wantProblem(t, 401, api.CodeUnauthorized)
	}
}

// waitStreamEnd waits for the stream to end; it fails the test after 10 s.
func waitStreamEnd(t *testing.T, s *rawStream, what string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-s.frames:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("%s: the stream of the key goes on", what)
		}
	}
}
