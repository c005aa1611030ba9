package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"

	"github.com/dshd/dshd/pkg/pgstore"
)

// Routes of the creates an Idempotency-Key makes safe to retry (docs/errors-and-idempotency.md);
// a key is the tenant's, per route.
const (
	idemRouteSession     = "POST /v1/sessions"
	idemRoutePreset      = "POST /v1/presets"
	idemRouteAPIKey      = "POST /v1/api-keys"
	idemRouteCredential  = "POST /v1/credentials"
	idemRouteWebhook     = "POST /v1/webhooks"
	idemRouteStreamToken = "POST /v1/sessions/{id}/stream-tokens"
	idemRouteActionToken = "POST /v1/sessions/{id}/action-tokens"
	idemRouteTenant      = "POST /v1/tenants"
	idemRouteImport      = "POST /v1/sessions/import"
)

// replayLocations are the creates whose answer has a Location header, which a replay rebuilds
// from the recorded body's id: the path before it, by route.
var replayLocations = map[string]string{idemRouteImport: "/v1/sessions/"}

// callerScope is the scope of a create whose answer depends on the API key that asks (a key
// minted by it is capped to its scopes and is its child; a stream token is tied to it): the
// tenant and the key, so another key of the tenant never replays it.
func callerScope(r *http.Request) string {
	if k, ok := apiKeyOf(r); ok {
		return tenantID(r).String() + "/key/" + k.ID.String()
	}
	return tenantID(r).String()
}

// idemScopeAdmin is the scope of the operator's keys (tenant creation has no tenant).
const idemScopeAdmin = "admin"

// headerReplayed marks the answer of a create that replays an earlier one.
const headerReplayed = "Idempotent-Replayed"

// idempotentCreate serves a create with the request's Idempotency-Key, if any: the first request
// with the key creates (create) and its successful answer is recorded, the fields named in
// secrets removed; a later request with the key and the same request (path, query and body,
// byte for byte) gets the recorded status and body, with the header Idempotent-Replayed: true, and creates
// nothing; with another request it answers 409 idempotency_conflict. A request that finds the
// key claimed by one in flight waits for it. A create that fails records nothing: the key may
// be retried. creates nil (the route is disabled) serves the create without a key.
func idempotentCreate(w http.ResponseWriter, r *http.Request, creates *pgstore.Creates, scope, route string,
	secrets []string, create http.HandlerFunc) {
	key, err := idempotencyKey(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if key == "" || creates == nil {
		create(w, r)
		return
	}
	body, err := io.ReadAll(r.Body) // bounded by limitBody and guardBody, as decodeJSON's read
	if err != nil {
		writeError(w, r, bodyError(err))
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	h := sha256.New()
	h.Write([]byte(r.URL.Path + "?" + r.URL.RawQuery + "\x00"))
	h.Write(body)
	k := pgstore.CreateKey{Scope: scope, Route: route, Key: key, Hash: h.Sum(nil)}
	claim, err := creates.Claim(r.Context(), k)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if claim.Replay != nil {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set(headerReplayed, "true")
		if prefix, ok := replayLocations[route]; ok {
			var created struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(claim.Replay.Body, &created) == nil && created.ID != "" {
				w.Header().Set("Location", prefix+created.ID)
			}
		}
		w.WriteHeader(claim.Replay.Status)
		_, _ = w.Write(claim.Replay.Body)
		return
	}
	rec := &recorder{header: http.Header{}}
	create(rec, r)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if rec.status >= 200 && rec.status < 300 {
		if err := creates.Complete(r.Context(), k, claim.Token, pgstore.CreateAnswer{Status: rec.status,
			Body: withoutSecrets(rec.body.Bytes(), secrets)}); err != nil {
			logger(r).LogAttrs(r.Context(), slog.LevelError, "idempotency key not recorded",
				slog.String("route", route), slog.String("error", err.Error()))
		}
	} else if err := creates.Release(r.Context(), k, claim.Token); err != nil {
		logger(r).LogAttrs(r.Context(), slog.LevelWarn, "idempotency key not released",
			slog.String("route", route), slog.String("error", err.Error()))
	}
	for name, v := range rec.header {
		w.Header()[name] = v
	}
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body.Bytes())
}

// idempotencyKey is the request's Idempotency-Key, "" without one; a key that is not printable
// text of at most 255 bytes is an invalid_request error naming the header.
func idempotencyKey(r *http.Request) (string, error) {
	key := r.Header.Get("Idempotency-Key")
	if len(key) > 255 || !printable(key) {
		return "", fieldError(headerPointer("Idempotency-Key"), "Idempotency-Key must be printable text of at most 255 bytes")
	}
	return key, nil
}

// withoutSecrets is the JSON object body without its top-level fields named in secrets: what a
// replay answers. A body that is not an object is kept as it is.
func withoutSecrets(body []byte, secrets []string) []byte {
	if len(secrets) == 0 {
		return body
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return body
	}
	for _, s := range secrets {
		delete(obj, s)
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return body
	}
	return out.Bytes()
}

// recorder holds a create's answer until its idempotency record is written.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(status int) {
	if rec.status == 0 {
		rec.status = status
	}
}

func (rec *recorder) Write(b []byte) (int, error) {
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return rec.body.Write(b)
}
