package pgstore

import (
	"context"
	"errors"
	"strings"

	"github.com/dshd/dshd/pkg/tenant"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// KeyCreate adds an API key to an existing tenant and returns its secret (shown once).
func (s *Tenants) KeyCreate(ctx context.Context, tenantID uuid.UUID) (string, error) {
	secret, err := keyInsert(ctx, s.pool, tenantID)
	if isForeignKeyViolation(err) {
		return "", tenant.ErrNotFound
	}
	if err != nil {
		return "", dbError(err, "tenant: key create")
	}
	return secret, nil
}

// KeyAuthenticate returns the tenant that owns the API key secret, or tenant.ErrNotFound when the key is
// unknown or revoked.
func (s *Tenants) KeyAuthenticate(ctx context.Context, secret string) (uuid.UUID, error) {
	if !strings.HasPrefix(secret, tenant.KeyPrefix) {
		return uuid.Nil, tenant.ErrNotFound
	}
	hash := tenant.KeyHash(secret)
	var id uuid.UUID
	err := s.pool.QueryRow(ctx,
		`SELECT tenant_id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL`, hash).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, tenant.ErrNotFound
	}
	if err != nil {
		return uuid.Nil, dbError(err, "tenant: key authenticate")
	}
	return id, nil
}

// KeyRevoke revokes the key with secret; later authentications with it fail.
func (s *Tenants) KeyRevoke(ctx context.Context, tenantID uuid.UUID, secret string) error {
	hash := tenant.KeyHash(secret)
	tag, err := s.pool.Exec(ctx, `UPDATE api_keys SET revoked_at = now()
		WHERE tenant_id = $1 AND key_hash = $2 AND revoked_at IS NULL`, tenantID, hash)
	if err != nil {
		return dbError(err, "tenant: key revoke")
	}
	if tag.RowsAffected() == 0 {
		return tenant.ErrNotFound
	}
	return nil
}

// execer is what keyInsert needs from a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// keyInsert generates a key for tenantID, stores its hash and returns the secret.
func keyInsert(ctx context.Context, db execer, tenantID uuid.UUID) (string, error) {
	secret, hash, prefix, err := tenant.NewKey()
	if err != nil {
		return "", err
	}
	_, err = db.Exec(ctx, `INSERT INTO api_keys (id, tenant_id, key_hash, prefix) VALUES ($1, $2, $3, $4)`,
		uuid.New(), tenantID, hash, prefix)
	if err != nil {
		return "", err
	}
	return secret, nil
}

func isForeignKeyViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503"
}
