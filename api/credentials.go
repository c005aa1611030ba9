package api

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/tenant"
)

// credentialResource serves /v1/credentials: the authenticated tenant's model provider keys.
// No response carries a key: they show a credential's id, name, provider and creation time.
type credentialResource struct {
	creds *pgstore.Credentials // nil: credentials are disabled
}

func (rs credentialResource) routes() chi.Router {
	r := chi.NewRouter()
	r.Post("/", rs.handleCredentialCreate)
	r.Get("/", rs.handleCredentialList)
	r.Get("/{id}", rs.handleCredentialGet)
	r.Delete("/{id}", rs.handleCredentialDelete)
	return r
}

// credentialCreateRequest is the body of POST /v1/credentials.
type credentialCreateRequest struct {
	Name     string `json:"name"`
	Provider string `json:"provider"`
	APIKey   string `json:"apiKey"`
}

// disabled answers credentials_disabled when the server has no credential store at all.
func (rs credentialResource) disabled(w http.ResponseWriter) bool {
	if rs.creds == nil {
		writeProblem(w, CodeCredentialsDisabled, tenant.ErrCredentialsDisabled.Message)
		return true
	}
	return false
}

// handleCredentialCreate stores a credential, encrypted: 201 with its metadata, never its key.
// An Idempotency-Key makes it safe to retry (idempotency.go).
func (rs credentialResource) handleCredentialCreate(w http.ResponseWriter, r *http.Request) {
	if rs.disabled(w) {
		return
	}
	idempotentCreate(w, r, rs.creds.Creates(), tenantID(r).String(), idemRouteCredential, nil, rs.createCredential)
}

func (rs credentialResource) createCredential(w http.ResponseWriter, r *http.Request) {
	var req credentialCreateRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	c, err := rs.creds.CredentialCreate(r.Context(), tenantID(r),
		tenant.CredentialSpec{Name: req.Name, Provider: req.Provider, APIKey: req.APIKey})
	if err != nil {
		writeError(w, r, pointTo(err, "name", "provider", "apiKey"))
		return
	}
	logger(r).Info("credential created", "credential", c.ID, "name", c.Name, "provider", c.Provider)
	writeJSON(w, http.StatusCreated, c)
}

// handleCredentialList answers {items} of the tenant's credentials, by name.
func (rs credentialResource) handleCredentialList(w http.ResponseWriter, r *http.Request) {
	if rs.disabled(w) {
		return
	}
	items, err := rs.creds.CredentialList(r.Context(), tenantID(r))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]tenant.Credential{"items": items})
}

// handleCredentialGet answers one credential's metadata.
func (rs credentialResource) handleCredentialGet(w http.ResponseWriter, r *http.Request) {
	if rs.disabled(w) {
		return
	}
	id, err := pathID(r, "credential")
	if err != nil {
		writeError(w, r, err)
		return
	}
	c, err := rs.creds.CredentialGet(r.Context(), tenantID(r), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// handleCredentialDelete deletes a credential: 204. Presets naming it fail their next model
// call with INVALID_CREDENTIAL.
func (rs credentialResource) handleCredentialDelete(w http.ResponseWriter, r *http.Request) {
	if rs.disabled(w) {
		return
	}
	id, err := pathID(r, "credential")
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := rs.creds.CredentialDelete(r.Context(), tenantID(r), id); err != nil {
		writeError(w, r, err)
		return
	}
	logger(r).Info("credential deleted", "credential", id)
	w.WriteHeader(http.StatusNoContent)
}
