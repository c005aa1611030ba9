// Package tenant stores tenants and their API keys in PostgreSQL.
//
// An API key is a random secret shown once, when it is created; only its SHA-256 hash and a short
// prefix (to recognise it in listings) are stored. Authenticating a request hashes the presented
// secret and looks the hash up. pgx errors are translated here into ErrNotFound; nothing above
// this package inspects a pgx error.
package tenant

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotFound reports an unknown tenant, or an API key that is unknown or revoked.
var ErrNotFound = &fault.Error{Code: fault.NotFound, Message: "tenant not found"}

// ErrInvalidName reports an empty or overlong tenant name.
var ErrInvalidName = &fault.Error{Code: fault.Invalid, Message: "tenant name must be 1 to 200 characters"}

// KeyPrefix starts every API key, so that a leaked key is recognisable by secret scanners.
const KeyPrefix = "dshd_"

// Tenant is one customer: every other row in the database belongs to exactly one tenant.
type Tenant struct {
	ID        uuid.UUID `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
}

// Store reads and writes tenants and API keys. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
}

// NewStore returns a store over pool; the caller keeps ownership of pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// TenantCreate creates a tenant and its first API key in one transaction and returns the key's
// secret, which is not stored and cannot be read again.
func (s *Store) TenantCreate(ctx context.Context, name string) (Tenant, string, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 200 {
		return Tenant{}, "", ErrInvalidName
	}
	t := Tenant{ID: uuid.New(), Name: name}
	var secret string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO tenants (id, name) VALUES ($1, $2) RETURNING created_at`,
			t.ID, t.Name).Scan(&t.CreatedAt)
		if err != nil {
			return err
		}
		secret, err = keyInsert(ctx, tx, t.ID)
		return err
	})
	if err != nil {
		return Tenant{}, "", fmt.Errorf("tenant: create: %w", err)
	}
	return t, secret, nil
}

// TenantGet returns the tenant with id, or ErrNotFound.
func (s *Store) TenantGet(ctx context.Context, id uuid.UUID) (Tenant, error) {
	t := Tenant{ID: id}
	err := s.pool.QueryRow(ctx, `SELECT name, created_at FROM tenants WHERE id = $1`, id).
		Scan(&t.Name, &t.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Tenant{}, ErrNotFound
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("tenant: get: %w", err)
	}
	return t, nil
}
