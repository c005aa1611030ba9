package pgstore

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/tenant"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// MaxKeysPerTenant bounds the API keys (revoked ones included) one tenant has.
const MaxKeysPerTenant = 100

// lastUsedEvery is how stale a key's last_used_at may get: an authentication writes it only when
// it is older than this, so a busy key costs one write a minute, not one per request. (The
// UPDATE's interval '1 minute' is the same bound, checked by the database's clock.)
const lastUsedEvery = time.Minute

// KeyCreate adds an API key with the default name and every scope (as a tenant's first key has)
// to an existing tenant and returns its secret (shown once).
func (s *Tenants) KeyCreate(ctx context.Context, tenantID uuid.UUID) (string, error) {
	_, secret, err := s.APIKeyCreate(ctx, tenantID, tenant.KeySpec{Scopes: tenant.AllScopes})
	return secret, err
}

// APIKeyCreate checks spec and adds an API key to the tenant: its record and its secret, which
// is not stored and cannot be read again. With a spec.Parent, the key is created only while the
// parent authenticates (tenant.ErrKeyParentInactive otherwise), checked by the insert itself under
// the tenant row lock that revocations take too (lock order: tenants row, then api_keys rows), so
// a parent revoked concurrently either sees the child and revokes it or is seen revoked.
func (s *Tenants) APIKeyCreate(ctx context.Context, tenantID uuid.UUID, spec tenant.KeySpec) (tenant.Key, string, error) {
	if err := spec.Normalize(time.Now()); err != nil {
		return tenant.Key{}, "", err
	}
	var k tenant.Key
	var secret string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var n int
		// The tenant row lock serializes the count check of concurrent creates.
		if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM api_keys WHERE tenant_id = $1)
			FROM tenants WHERE id = $1 FOR UPDATE`, tenantID).Scan(&n); err != nil {
			return err
		}
		if n >= MaxKeysPerTenant {
			return errTooManyKeys
		}
		var err error
		k, secret, err = keyInsert(ctx, tx, tenantID, spec)
		return err
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return tenant.Key{}, "", tenant.ErrNotFound
	case errors.Is(err, tenant.ErrKeyParentInactive):
		return tenant.Key{}, "", tenant.ErrKeyParentInactive
	case errors.Is(err, errTooManyKeys):
		return tenant.Key{}, "", errTooManyKeys
	case err != nil:
		return tenant.Key{}, "", dbError(err, "tenant: key create")
	}
	return k, secret, nil
}

var errTooManyKeys = fault.New(fault.Conflict, "a tenant has at most %d API keys, revoked ones included", MaxKeysPerTenant)

// KeyAuthenticate returns the tenant that owns the API key secret, or tenant.ErrNotFound when the
// key is unknown or revoked, or tenant.ErrKeyExpired.
func (s *Tenants) KeyAuthenticate(ctx context.Context, secret string) (uuid.UUID, error) {
	k, err := s.KeyLookup(ctx, secret)
	if err != nil {
		return uuid.Nil, err
	}
	return k.TenantID, nil
}

// KeyLookup returns the record of the API key with secret, read from the database (so a
// revocation or rotation holds on every replica at once). It fails with tenant.ErrNotFound for
// an unknown, rotated or revoked key and with tenant.ErrKeyExpired (the record is returned too)
// for an expired one. It records the use in last_used_at when that is more than a minute old.
func (s *Tenants) KeyLookup(ctx context.Context, secret string) (tenant.Key, error) {
	if !strings.HasPrefix(secret, tenant.KeyPrefix) {
		return tenant.Key{}, tenant.ErrNotFound
	}
	row := s.pool.QueryRow(ctx, keySelect+` WHERE key_hash = $1 AND revoked_at IS NULL`, tenant.KeyHash(secret))
	k, expired, err := scanKey(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return tenant.Key{}, tenant.ErrNotFound
	}
	if err != nil {
		return tenant.Key{}, dbError(err, "tenant: key authenticate")
	}
	if expired {
		return k, tenant.ErrKeyExpired
	}
	if k.LastUsedAt == nil || time.Since(*k.LastUsedAt) > lastUsedEvery {
		// At most one write a minute per key; the condition keeps concurrent requests (and
		// replicas) from writing it more often. A failure costs only the timestamp.
		_, _ = s.pool.Exec(ctx, `UPDATE api_keys SET last_used_at = now()
			WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')`, k.ID)
	}
	return k, nil
}

// KeyActive reports whether the tenant's API key id still authenticates with the secret whose
// hash starts with hashPrefix: nil, or tenant.ErrNotFound when it was revoked, rotated (another
// hash) or has expired. A stream token carries its minting key this way (api/tokens.go).
func (s *Tenants) KeyActive(ctx context.Context, tenantID, id uuid.UUID, hashPrefix []byte) error {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM api_keys WHERE id = $1 AND tenant_id = $2
		AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
		AND substring(key_hash FROM 1 FOR $3::int) = $4`, id, tenantID, len(hashPrefix), hashPrefix).Scan(&n)
	if err != nil {
		return dbError(err, "tenant: key check")
	}
	if n == 0 || len(hashPrefix) == 0 {
		return tenant.ErrNotFound
	}
	return nil
}

// APIKeyList returns the tenant's API keys, revoked ones included, oldest first.
func (s *Tenants) APIKeyList(ctx context.Context, tenantID uuid.UUID) ([]tenant.Key, error) {
	rows, err := s.pool.Query(ctx, keySelect+` WHERE tenant_id = $1 ORDER BY created_at, id`, tenantID)
	if err != nil {
		return nil, dbError(err, "tenant: key list")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (tenant.Key, error) {
		k, _, err := scanKey(r)
		return k, err
	})
	if err != nil {
		return nil, dbError(err, "tenant: key list")
	}
	if out == nil {
		out = []tenant.Key{}
	}
	return out, nil
}

// APIKeyGet returns the tenant's API key id, or tenant.ErrNotFound.
func (s *Tenants) APIKeyGet(ctx context.Context, tenantID, id uuid.UUID) (tenant.Key, error) {
	k, _, err := scanKey(s.pool.QueryRow(ctx, keySelect+` WHERE id = $1 AND tenant_id = $2`, id, tenantID))
	if errors.Is(err, pgx.ErrNoRows) {
		return tenant.Key{}, tenant.ErrNotFound
	}
	if err != nil {
		return tenant.Key{}, dbError(err, "tenant: key get")
	}
	return k, nil
}

// APIKeyRotate gives the tenant's API key id a new secret, keeping its id, name, scopes and
// expiry: the old secret stops working at once, on every replica, and so do the keys created with
// it (its descendants are revoked in the same transaction). A revoked key is not found; an
// expired one cannot be rotated (tenant.ErrKeyExpired).
func (s *Tenants) APIKeyRotate(ctx context.Context, tenantID, id uuid.UUID) (tenant.Key, string, error) {
	secret, hash, prefix, err := tenant.NewKey()
	if err != nil {
		return tenant.Key{}, "", err
	}
	var k tenant.Key
	err = lockedForKeys(ctx, s, tenantID, func(tx pgx.Tx) error {
		row := tx.QueryRow(ctx, `UPDATE api_keys SET key_hash = $3, prefix = $4, rotated_at = now()
			WHERE id = $1 AND tenant_id = $2 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
			RETURNING `+keyColumns, id, tenantID, hash, prefix)
		if k, _, err = scanKey(row); err != nil {
			return err
		}
		// The keys created with the old secret go with it: its descendants, not the key itself.
		_, err = tx.Exec(ctx, revokeTree+` SELECT id FROM tree WHERE id <> $1)`, id, tenantID)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) || errors.Is(err, tenant.ErrNotFound) {
		old, gerr := s.APIKeyGet(ctx, tenantID, id)
		if gerr == nil && old.RevokedAt == nil {
			return tenant.Key{}, "", tenant.ErrKeyExpired
		}
		return tenant.Key{}, "", tenant.ErrNotFound
	}
	if err != nil {
		return tenant.Key{}, "", dbError(err, "tenant: key rotate")
	}
	return k, secret, nil
}

// APIKeyRevoke revokes the tenant's API key id and every key it created, their children
// included (parent_id, recursively), in one statement: later requests with any of them answer 401
// on every replica. Revoking a revoked key revokes what it created since (nothing, as a revoked
// key creates none) and answers nil; an unknown one is tenant.ErrNotFound.
func (s *Tenants) APIKeyRevoke(ctx context.Context, tenantID, id uuid.UUID) error {
	var n int64
	err := lockedForKeys(ctx, s, tenantID, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, revokeTree+` SELECT id FROM tree)`, id, tenantID)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return dbError(err, "tenant: key revoke")
	}
	if n == 0 {
		return tenant.ErrNotFound
	}
	return nil
}

// revokeTree, completed by a selection from tree and a closing parenthesis, is the statement that
// revokes the keys it selects of tree: the key $1 of the tenant $2 and its descendants. A key
// already revoked keeps its revocation time (and still counts as affected).
const revokeTree = `WITH RECURSIVE tree AS (
		SELECT id FROM api_keys WHERE id = $1 AND tenant_id = $2
		UNION
		SELECT k.id FROM api_keys k JOIN tree ON k.parent_id = tree.id WHERE k.tenant_id = $2)
	UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id IN (`

// lockedForKeys runs f in a transaction holding the tenant's row lock, which key creates and
// revocations take first: a revocation's statement then sees every child created before it, and
// a create's insert sees every revocation before it. tenant.ErrNotFound without the tenant.
func lockedForKeys(ctx context.Context, s *Tenants, tenantID uuid.UUID, f func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM tenants WHERE id = $1 FOR UPDATE`, tenantID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return tenant.ErrNotFound
		}
		if err != nil {
			return err
		}
		return f(tx)
	})
}

// KeyRevoke revokes the unrevoked key with secret and its descendants, as APIKeyRevoke does;
// later authentications with any of them fail.
func (s *Tenants) KeyRevoke(ctx context.Context, tenantID uuid.UUID, secret string) error {
	var id uuid.UUID
	err := s.pool.QueryRow(ctx, `SELECT id FROM api_keys WHERE tenant_id = $1 AND key_hash = $2 AND revoked_at IS NULL`,
		tenantID, tenant.KeyHash(secret)).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return tenant.ErrNotFound
	}
	if err != nil {
		return dbError(err, "tenant: key revoke")
	}
	return s.APIKeyRevoke(ctx, tenantID, id)
}

const keyColumns = `id, tenant_id, name, prefix, scopes, created_at, last_used_at, expires_at, rotated_at, revoked_at,
	(expires_at IS NOT NULL AND expires_at <= now()), parent_id`

const keySelect = `SELECT ` + keyColumns + ` FROM api_keys`

// scanKey reads a row of keyColumns and whether the key has expired (by the database's clock).
func scanKey(row pgx.Row) (tenant.Key, bool, error) {
	var k tenant.Key
	var expired bool
	err := row.Scan(&k.ID, &k.TenantID, &k.Name, &k.Prefix, &k.Scopes, &k.CreatedAt, &k.LastUsedAt,
		&k.ExpiresAt, &k.RotatedAt, &k.RevokedAt, &expired, &k.ParentID)
	return k, expired, err
}

// execer is what keyInsert needs from a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// keyInsert generates a key for tenantID with a normalized spec, stores its hash and returns its
// record and secret.
func keyInsert(ctx context.Context, db execer, tenantID uuid.UUID, spec tenant.KeySpec) (tenant.Key, string, error) {
	secret, hash, prefix, err := tenant.NewKey()
	if err != nil {
		return tenant.Key{}, "", err
	}
	if spec.Name == "" {
		spec.Name = tenant.DefaultKeyName
	}
	if len(spec.Scopes) == 0 {
		spec.Scopes = []string{tenant.ScopeRead, tenant.ScopeWrite}
	}
	var parent *uuid.UUID
	if spec.Parent != uuid.Nil {
		parent = &spec.Parent
	}
	// The parent is checked by the insert itself, its row share-locked until the commit (a
	// revocation's update of it waits for the child to be committed; the tenant row lock, taken
	// by both first, is what makes the revocation's statement see the child). With a ParentHash
	// the parent must still have the secret the request authenticated with: a rotation committed
	// after the authentication (its revocation of the descendants then saw no child) refuses the
	// create instead of leaving a key minted with the old secret alive.
	var parentHash []byte
	if parent != nil && len(spec.ParentHash) > 0 {
		parentHash = spec.ParentHash
	}
	row := db.QueryRow(ctx, `INSERT INTO api_keys (id, tenant_id, key_hash, prefix, name, scopes, expires_at, parent_id)
		SELECT $1, $2, $3, $4, $5, $6, $7, $8
		WHERE $8::uuid IS NULL OR EXISTS (SELECT 1 FROM api_keys p WHERE p.id = $8 AND p.tenant_id = $2
			AND p.revoked_at IS NULL AND (p.expires_at IS NULL OR p.expires_at > now())
			AND ($9::bytea IS NULL OR p.key_hash = $9) FOR SHARE)
		RETURNING `+keyColumns,
		uuid.New(), tenantID, hash, prefix, spec.Name, spec.Scopes, spec.ExpiresAt, parent, parentHash)
	k, _, err := scanKey(row)
	if errors.Is(err, pgx.ErrNoRows) && parent != nil {
		return tenant.Key{}, "", tenant.ErrKeyParentInactive
	}
	if err != nil {
		return tenant.Key{}, "", err
	}
	return k, secret, nil
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}
