package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/tenant"
)

type tenantKey struct{}

// tenantID returns the tenant authenticated by the auth middleware.
func tenantID(r *http.Request) uuid.UUID {
	id, _ := r.Context().Value(tenantKey{}).(uuid.UUID)
	return id
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// authenticate requires `Authorization: Bearer <api key>` and puts the key's tenant (and record,
// scopes.go) in the request context; anything else answers 401 (an expired key says when it
// expired). A key without the scope the route needs (requiredScope, scopes.go) gets 403
// insufficient_scope. Without the header, a stream token (?token=, tokens.go) may open a
// session's event stream; an action token (actiontokens.go) in the header acts in its session.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := bearer(r)
		if !ok && r.URL.Query().Has("token") {
			s.streamTokenAuth(w, r, next) // tokens.go
			return
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dshd"`)
			writeProblem(w, CodeUnauthorized, "send an API key as Authorization: Bearer <key>")
			return
		}
		if strings.HasPrefix(key, actionTokenPrefix) {
			s.actionTokenAuth(w, r, next, key, false) // actiontokens.go
			return
		}
		k, err := s.cfg.Tenants.KeyLookup(r.Context(), key)
		if errors.Is(err, tenant.ErrKeyExpired) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dshd", error="invalid_token"`)
			writeProblem(w, CodeUnauthorized, "the API key expired at "+k.ExpiresAt.UTC().Format(time.RFC3339))
			return
		}
		if errors.Is(err, tenant.ErrNotFound) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dshd", error="invalid_token"`)
			writeProblem(w, CodeUnauthorized, "unknown or revoked API key")
			return
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		info(r).tenant = k.TenantID
		info(r).authenticated()
		if need := s.requiredScope(r); !k.Has(need) {
			refuseScope(w, r, need)
			return
		}
		ctx := context.WithValue(r.Context(), tenantKey{}, k.TenantID)
		next.ServeHTTP(w, r.WithContext(withAPIKey(ctx, s.cfg.Tenants, key, k)))
	})
}

// adminOnly requires `Authorization: Bearer <DSHD_ADMIN_TOKEN>` (or, during a rotation, one of
// DSHD_ADMIN_TOKEN_PREVIOUS); without a configured admin token every admin request answers 401.
func (s *Server) adminOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearer(r)
		if s.cfg.AdminToken == "" {
			writeProblem(w, CodeUnauthorized, "tenant administration is disabled: the server has no DSHD_ADMIN_TOKEN")
			return
		}
		if !ok || !s.isAdminToken(token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dshd-admin"`)
			writeProblem(w, CodeUnauthorized, "send the admin token as Authorization: Bearer <token>")
			return
		}
		info(r).authenticated()
		next.ServeHTTP(w, r)
	})
}

// isAdminToken reports whether token is the admin token or one of the previous ones still
// accepted. The SHA-256 digests are compared, each in constant time: a digest has one length
// whatever the token's, so neither the time taken nor an early return tells which candidate
// matched, how much of one, or how long any is (ConstantTimeCompare of the raw bytes returns at
// once on a length mismatch).
func (s *Server) isAdminToken(token string) bool {
	got := sha256.Sum256([]byte(token))
	want := sha256.Sum256([]byte(s.cfg.AdminToken))
	match := subtle.ConstantTimeCompare(got[:], want[:])
	for _, prev := range s.cfg.AdminTokenPrevious {
		if prev != "" {
			want = sha256.Sum256([]byte(prev))
			match |= subtle.ConstantTimeCompare(got[:], want[:])
		}
	}
	return match == 1
}
