package api

import (
	"net/http"
	"time"

	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/google/uuid"
)

// tenantResource serves tenant administration (admin token only).
type tenantResource struct {
	tenants *pgstore.Tenants
}

type tenantCreateRequest struct {
	Name string `json:"name"`
}

// tenantCreated is the only response that ever carries an API key's secret.
type tenantCreated struct {
	ID        uuid.UUID `json:"id"`
	Name      string    `json:"name"`
	APIKey    string    `json:"apiKey"`
	CreatedAt time.Time `json:"createdAt"`
}

// handleTenantCreate creates a tenant with its first API key: 201 {id, name, apiKey, createdAt}.
// An Idempotency-Key (the operator's) makes it safe to retry; a replay answers the tenant
// without apiKey (idempotency.go).
func (rs tenantResource) handleTenantCreate(w http.ResponseWriter, r *http.Request) {
	idempotentCreate(w, r, rs.tenants.Creates(), idemScopeAdmin, idemRouteTenant, []string{"apiKey"}, rs.createTenant)
}

func (rs tenantResource) createTenant(w http.ResponseWriter, r *http.Request) {
	var req tenantCreateRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	t, key, err := rs.tenants.TenantCreate(r.Context(), req.Name)
	if err != nil {
		writeError(w, r, pointTo(err, "tenant name=/name"))
		return
	}
	info(r).tenant = t.ID
	logger(r).Info("tenant created", "name", t.Name)
	writeJSON(w, http.StatusCreated, tenantCreated{ID: t.ID, Name: t.Name, APIKey: key, CreatedAt: t.CreatedAt})
}
