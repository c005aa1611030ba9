package pgstore

import (
	"context"
	"errors"
	"strings"

	"github.com/dshd/dshd/pkg/tenant"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Tenants reads and writes tenants and API keys. It is safe for concurrent use.
type Tenants struct {
	pool *pgxpool.Pool
}

// NewTenants returns the tenant store over pool; the caller keeps ownership of pool.
func NewTenants(pool *pgxpool.Pool) *Tenants { return &Tenants{pool: pool} }

// TenantCreate creates a tenant and its first API key (with every scope, tenant.AllScopes) in one
// transaction and returns the key's secret, which is not stored and cannot be read again.
func (s *Tenants) TenantCreate(ctx context.Context, name string) (tenant.Tenant, string, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 200 {
		return tenant.Tenant{}, "", tenant.ErrInvalidName
	}
	t := tenant.Tenant{ID: uuid.New(), Name: name}
	var secret string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO tenants (id, name) VALUES ($1, $2) RETURNING created_at`,
			t.ID, t.Name).Scan(&t.CreatedAt)
		if err != nil {
			return err
		}
		_, secret, err = keyInsert(ctx, tx, t.ID, tenant.KeySpec{Scopes: tenant.AllScopes})
		return err
	})
	if err != nil {
		return tenant.Tenant{}, "", dbError(err, "tenant: create")
	}
	return t, secret, nil
}

// TenantGet returns the tenant with id, or tenant.ErrNotFound.
func (s *Tenants) TenantGet(ctx context.Context, id uuid.UUID) (tenant.Tenant, error) {
	t := tenant.Tenant{ID: id}
	err := s.pool.QueryRow(ctx, `SELECT name, created_at FROM tenants WHERE id = $1`, id).
		Scan(&t.Name, &t.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return tenant.Tenant{}, tenant.ErrNotFound
	}
	if err != nil {
		return tenant.Tenant{}, dbError(err, "tenant: get")
	}
	return t, nil
}
