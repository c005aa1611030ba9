package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/tenant"
)

// apiKeyResource serves /v1/api-keys: the authenticated tenant's API keys. Every change needs a
// key with the keys scope (authenticate refuses others before these handlers), and a key hands
// out, or takes over by rotation, no scope and no lifetime beyond its own (capKey).
type apiKeyResource struct {
	tenants *pgstore.Tenants
}

func (rs apiKeyResource) routes() chi.Router {
	r := chi.NewRouter()
	r.Post("/", rs.handleKeyCreate)
	r.Get("/", rs.handleKeyList)
	r.Get("/{id}", rs.handleKeyGet)
	r.Post("/{id}/rotate", rs.handleKeyRotate)
	r.Delete("/{id}", rs.handleKeyRevoke)
	return r
}

// maxKeyLifetime bounds expiresInSeconds (and so the distance of expiresAt): ten years.
const maxKeyLifetime = 10 * 365 * 24 * time.Hour

// apiKeyCreateRequest is the body of POST /v1/api-keys. At most one of ExpiresAt and
// ExpiresInSeconds; neither: the key does not expire.
type apiKeyCreateRequest struct {
	Name             string     `json:"name"`
	Scopes           []string   `json:"scopes"`
	ExpiresAt        *time.Time `json:"expiresAt"`
	ExpiresInSeconds *int64     `json:"expiresInSeconds"`
}

// apiKeyCreated is a key's record with its secret: the answer of a create and of a rotation, the
// only responses that carry a secret.
type apiKeyCreated struct {
	tenant.Key
	Secret string `json:"secret"`
}

// handleKeyCreate creates an API key: 201 with its secret, shown this once. An Idempotency-Key
// makes it safe to retry; a replay answers the key without its secret (idempotency.go).
func (rs apiKeyResource) handleKeyCreate(w http.ResponseWriter, r *http.Request) {
	idempotentCreate(w, r, rs.tenants.Creates(), callerScope(r), idemRouteAPIKey, []string{"secret"}, rs.createKey)
}

func (rs apiKeyResource) createKey(w http.ResponseWriter, r *http.Request) {
	var req apiKeyCreateRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	spec := tenant.KeySpec{Name: req.Name, Scopes: req.Scopes, ExpiresAt: req.ExpiresAt}
	if req.ExpiresInSeconds != nil {
		if req.ExpiresAt != nil {
			writeError(w, r, &fieldsError{fault: errorf(CodeInvalidRequest, "set expiresAt or expiresInSeconds, not both"),
				fields: []FieldError{{Pointer: "/expiresAt", Detail: "set expiresAt or expiresInSeconds, not both"},
					{Pointer: "/expiresInSeconds", Detail: "set expiresAt or expiresInSeconds, not both"}}})
			return
		}
		n := *req.ExpiresInSeconds
		if n < 1 || n > int64(maxKeyLifetime/time.Second) {
			writeError(w, r, fieldError("/expiresInSeconds", "expiresInSeconds must be 1 to 315360000 (ten years)"))
			return
		}
		at := time.Now().Add(time.Duration(n) * time.Second).UTC()
		spec.ExpiresAt = &at
	}
	if spec.ExpiresAt != nil && time.Until(*spec.ExpiresAt) > maxKeyLifetime {
		writeError(w, r, fieldError("/expiresAt", "expiresAt must lie within ten years"))
		return
	}
	if err := capKey(r, &spec); err != nil {
		writeError(w, r, err)
		return
	}
	k, secret, err := rs.tenants.APIKeyCreate(r.Context(), tenantID(r), spec)
	if errors.Is(err, tenant.ErrKeyParentInactive) { // revoked (or expired) since it authenticated
		w.Header().Set("WWW-Authenticate", `Bearer realm="dshd", error="invalid_token"`)
		writeProblem(w, CodeUnauthorized, "unknown or revoked API key")
		return
	}
	if err != nil {
		writeError(w, r, pointTo(err, "name", "expiresAt", "unknown scope=/scopes"))
		return
	}
	logger(r).Info("api key created", "key", k.ID, "name", k.Name)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, apiKeyCreated{Key: k, Secret: secret})
}

// handleKeyList answers {items} of every key of the tenant, revoked ones included, oldest first.
func (rs apiKeyResource) handleKeyList(w http.ResponseWriter, r *http.Request) {
	keys, err := rs.tenants.APIKeyList(r.Context(), tenantID(r))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]tenant.Key{"items": keys})
}

// handleKeyGet answers one key's record.
func (rs apiKeyResource) handleKeyGet(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "API key")
	if err != nil {
		writeError(w, r, err)
		return
	}
	k, err := rs.tenants.APIKeyGet(r.Context(), tenantID(r), id)
	if err != nil {
		writeError(w, r, keyNotFound(err))
		return
	}
	writeJSON(w, http.StatusOK, k)
}

// handleKeyRotate gives the key a new secret (200 with it, shown this once); the old secret stops
// working at once on every replica, and so do the keys it created (revoked, recursively).
func (rs apiKeyResource) handleKeyRotate(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "API key")
	if err != nil {
		writeError(w, r, err)
		return
	}
	old, err := rs.tenants.APIKeyGet(r.Context(), tenantID(r), id)
	if err != nil {
		writeError(w, r, keyNotFound(err))
		return
	}
	if me, ok := apiKeyOf(r); ok && !me.Covers(old.Scopes, old.ExpiresAt) {
		writeProblem(w, CodeInsufficientScope, "this API key cannot rotate a key with scopes or a lifetime beyond its own")
		return
	}
	k, secret, err := rs.tenants.APIKeyRotate(r.Context(), tenantID(r), id)
	if errors.Is(err, tenant.ErrKeyExpired) {
		writeProblem(w, CodeConflict, "the API key has expired: create a new one instead")
		return
	}
	if err != nil {
		writeError(w, r, keyNotFound(err))
		return
	}
	logger(r).Info("api key rotated", "key", k.ID)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, apiKeyCreated{Key: k, Secret: secret})
}

// handleKeyRevoke revokes the key and every key it created (recursively): 204, also when it was
// revoked before. Requests with any of them answer 401 on every replica from then on.
func (rs apiKeyResource) handleKeyRevoke(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "API key")
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := rs.tenants.APIKeyRevoke(r.Context(), tenantID(r), id); err != nil {
		writeError(w, r, keyNotFound(err))
		return
	}
	logger(r).Info("api key revoked", "key", id)
	w.WriteHeader(http.StatusNoContent)
}

// capKey fills the defaults of a key the request's API key creates and keeps it within that key:
// no scope it does not have (by default read and write, those of them it has), and no expiry
// after its own (by default its own). Beyond it: 403 insufficient_scope.
func capKey(r *http.Request, spec *tenant.KeySpec) error {
	me, ok := apiKeyOf(r)
	if !ok {
		return errorf(CodeInsufficientScope, "only an API key creates API keys")
	}
	if len(spec.Scopes) == 0 {
		for _, sc := range []string{tenant.ScopeRead, tenant.ScopeWrite} {
			if me.Has(sc) {
				spec.Scopes = append(spec.Scopes, sc)
			}
		}
	}
	spec.Parent = me.ID // recorded, and checked by the insert: a revoked key mints nothing
	// and neither does the old secret of a key rotated since this request authenticated.
	if a, ok := r.Context().Value(apiKeyCtx{}).(*authKey); ok {
		spec.ParentHash = a.hash
	}
	if spec.ExpiresAt == nil && me.ExpiresAt != nil {
		at := *me.ExpiresAt
		spec.ExpiresAt = &at
	}
	for _, sc := range spec.Scopes {
		if sc != tenant.ScopeRead && sc != tenant.ScopeWrite && sc != tenant.ScopeKeys {
			return nil // the store refuses an unknown scope with 400
		}
	}
	if !me.Covers(spec.Scopes, spec.ExpiresAt) {
		return errorf(CodeInsufficientScope, "a key cannot give a new key a scope it does not have, nor a later expiry than its own ("+
			expiryText(me.ExpiresAt)+")")
	}
	return nil
}

// expiryText says when a key expires, for a message.
func expiryText(at *time.Time) string {
	if at == nil {
		return "it does not expire"
	}
	return "it expires at " + at.UTC().Format(time.RFC3339)
}

// keyNotFound says "API key not found" rather than the tenant store's "tenant not found".
func keyNotFound(err error) error {
	if errors.Is(err, tenant.ErrNotFound) {
		return errorf(CodeNotFound, "API key not found")
	}
	return err
}
