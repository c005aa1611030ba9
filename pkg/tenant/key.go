package tenant

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// KeyCreate adds an API key to an existing tenant and returns its secret (shown once).
func (s *Store) KeyCreate(ctx context.Context, tenantID uuid.UUID) (string, error) {
	secret, err := keyInsert(ctx, s.pool, tenantID)
	if isForeignKeyViolation(err) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("tenant: key create: %w", err)
	}
	return secret, nil
}

// KeyAuthenticate returns the tenant that owns the API key secret, or ErrNotFound when the key is
// unknown or revoked.
func (s *Store) KeyAuthenticate(ctx context.Context, secret string) (uuid.UUID, error) {
	if !strings.HasPrefix(secret, KeyPrefix) {
		return uuid.Nil, ErrNotFound
	}
	hash := sha256.Sum256([]byte(secret))
	var id uuid.UUID
	err := s.pool.QueryRow(ctx,
		`SELECT tenant_id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL`, hash[:]).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, ErrNotFound
	}
	if err != nil {
		return uuid.Nil, fmt.Errorf("tenant: key authenticate: %w", err)
	}
	return id, nil
}

// KeyRevoke revokes the key with secret; later authentications with it fail.
func (s *Store) KeyRevoke(ctx context.Context, tenantID uuid.UUID, secret string) error {
	hash := sha256.Sum256([]byte(secret))
	tag, err := s.pool.Exec(ctx, `UPDATE api_keys SET revoked_at = now()
		WHERE tenant_id = $1 AND key_hash = $2 AND revoked_at IS NULL`, tenantID, hash[:])
	if err != nil {
		return fmt.Errorf("tenant: key revoke: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// execer is what keyInsert needs from a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// keyInsert generates a key for tenantID, stores its hash and returns the secret:
// KeyPrefix followed by 32 random bytes in unpadded base64url.
func keyInsert(ctx context.Context, db execer, tenantID uuid.UUID) (string, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	secret := KeyPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	hash := sha256.Sum256([]byte(secret))
	_, err := db.Exec(ctx, `INSERT INTO api_keys (id, tenant_id, key_hash, prefix) VALUES ($1, $2, $3, $4)`,
		uuid.New(), tenantID, hash[:], secret[:len(KeyPrefix)+6])
	if err != nil {
		return "", err
	}
	return secret, nil
}

func isForeignKeyViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503"
}
