package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/tenant"
)

// The scope an API key needs for a request is decided by the route it reaches (its chi pattern,
// as Server.Routes lists it), not by the method alone:
//
//   - the routes of routeScopes need the scope named there;
//   - any other GET or HEAD needs read (which every key has);
//   - any other request to /v1/api-keys needs keys;
//   - any other request needs write.
//
// So a route added later is a write route unless it is a GET, and a GET that shows a secret must
// be listed here.
var routeScopes = map[string]string{
	// A stream token only opens one session's event stream: reading.
	"POST /v1/sessions/{id}/stream-tokens": tenant.ScopeRead,
	// The preset's policy-webhook signing secret lets its holder forge the preset's webhook calls.
	"GET /v1/presets/{id}/webhook-secret": tenant.ScopeWrite,
	// Setting a session's approval policy changes what its tools may do: writing.
	"PUT /v1/sessions/{id}/approval-policy": tenant.ScopeWrite,
}

// requiredScope is the scope r needs (see routeScopes).
func (s *Server) requiredScope(r *http.Request) string {
	pattern := s.routePattern(r)
	if sc, ok := routeScopes[r.Method+" "+pattern]; ok {
		return sc
	}
	switch {
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		return tenant.ScopeRead
	case pattern == "/v1/api-keys" || strings.HasPrefix(pattern, "/v1/api-keys/") ||
		(pattern == "" && strings.HasPrefix(r.URL.Path, "/v1/api-keys")):
		return tenant.ScopeKeys
	}
	return tenant.ScopeWrite
}

// refuseScope answers 403 insufficient_scope for a key without scope.
func refuseScope(w http.ResponseWriter, r *http.Request, scope string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="dshd", error="insufficient_scope", scope="`+scope+`"`)
	writeProblem(w, CodeInsufficientScope, "this API key does not have the "+scope+" scope, which "+r.Method+" "+r.URL.Path+" needs")
}

type apiKeyCtx struct{}

// authKey is the API key a request authenticated with: its record and hash (nil for a stream
// token, whose minting key's check alone is here), and the check that it still holds (for
// streams, which outlive their request's authentication).
type authKey struct {
	key   tenant.Key
	hash  []byte
	check func(context.Context) error
}

// withAPIKey puts the key (secret and record) a request authenticated with in ctx.
func withAPIKey(ctx context.Context, tenants *pgstore.Tenants, secret string, k tenant.Key) context.Context {
	return context.WithValue(ctx, apiKeyCtx{}, &authKey{key: k, hash: tenant.KeyHash(secret), check: func(ctx context.Context) error {
		_, err := tenants.KeyLookup(ctx, secret)
		return err
	}})
}

// apiKeyOf returns the record of the API key r authenticated with; false for a stream token.
func apiKeyOf(r *http.Request) (tenant.Key, bool) {
	a, ok := r.Context().Value(apiKeyCtx{}).(*authKey)
	if !ok || a.hash == nil {
		return tenant.Key{}, false
	}
	return a.key, true
}

// errKeyGone ends a stream whose API key was revoked, rotated or has expired since it opened.
var errKeyGone = errors.New("the stream's API key was revoked, rotated or has expired")

// keyCheck returns the check that r's API key (or the key that minted r's stream token) still
// holds, or nil (a stream token of the former format, tied to no key). The check returns errKeyGone when the key no longer
// authenticates, nil when it does or when the database cannot tell now (the stream goes on; the
// next check decides).
func keyCheck(r *http.Request) func(context.Context) error {
	a, ok := r.Context().Value(apiKeyCtx{}).(*authKey)
	if !ok {
		return nil
	}
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := a.check(ctx)
		if errors.Is(err, tenant.ErrNotFound) || errors.Is(err, tenant.ErrKeyExpired) {
			return errKeyGone
		}
		return nil
	}
}
