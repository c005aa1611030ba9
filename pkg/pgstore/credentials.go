package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/secretbox"
	"github.com/dshd/dshd/pkg/tenant"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// MaxCredentialsPerTenant bounds the credentials one tenant stores.
const MaxCredentialsPerTenant = 100

// Credentials stores tenants' model provider keys, envelope-encrypted with the operator's
// keyring (pkg/secretbox): the plaintext key is never written to the database, and only
// CredentialResolve returns it. It is safe for concurrent use.
type Credentials struct {
	pool *pgxpool.Pool
	keys *secretbox.Keyring // nil: credentials are disabled
}

// NewCredentials returns the credential store over pool. keys nil disables storing and
// resolving credentials (tenant.ErrCredentialsDisabled); listing and deleting still work.
func NewCredentials(pool *pgxpool.Pool, keys *secretbox.Keyring) *Credentials {
	return &Credentials{pool: pool, keys: keys}
}

// Enabled reports whether the store has a keyring.
func (s *Credentials) Enabled() bool { return s != nil && s.keys != nil }

// CredentialCreate checks spec, encrypts its key under a fresh data key wrapped by the active
// key encryption key, and stores it.
func (s *Credentials) CredentialCreate(ctx context.Context, tenantID uuid.UUID, spec tenant.CredentialSpec) (tenant.Credential, error) {
	if !s.Enabled() {
		return tenant.Credential{}, tenant.ErrCredentialsDisabled
	}
	if err := spec.Normalize(); err != nil {
		return tenant.Credential{}, err
	}
	c := tenant.Credential{ID: uuid.New(), Name: spec.Name, Provider: spec.Provider}
	sealed, err := s.keys.Seal([]byte(spec.APIKey), tenant.CredentialAAD(tenantID, c.ID))
	if err != nil {
		return tenant.Credential{}, fmt.Errorf("credential: seal: %w", err)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The tenant row lock serializes the count check of concurrent creates.
		var n int
		if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM credentials WHERE tenant_id = $1)
			FROM tenants WHERE id = $1 FOR UPDATE`, tenantID).Scan(&n); err != nil {
			return err
		}
		if n >= MaxCredentialsPerTenant {
			return fault.New(fault.Conflict, "a tenant stores at most %d credentials", MaxCredentialsPerTenant)
		}
		return tx.QueryRow(ctx, `INSERT INTO credentials (id, tenant_id, name, provider, kek_id, wrapped_key, ciphertext)
			VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING created_at`,
			c.ID, tenantID, c.Name, c.Provider, sealed.KeyID, sealed.WrappedKey, sealed.Ciphertext).Scan(&c.CreatedAt)
	})
	var fe *fault.Error
	switch {
	case errors.As(err, &fe):
		return tenant.Credential{}, err
	case errors.Is(err, pgx.ErrNoRows):
		return tenant.Credential{}, tenant.ErrNotFound
	case isUniqueViolation(err):
		return tenant.Credential{}, tenant.ErrCredentialExists
	case err != nil:
		return tenant.Credential{}, dbError(err, "credential: create")
	}
	return c, nil
}

// CredentialList returns the tenant's credentials (without keys) by name.
func (s *Credentials) CredentialList(ctx context.Context, tenantID uuid.UUID) ([]tenant.Credential, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, name, provider, created_at FROM credentials
		WHERE tenant_id = $1 ORDER BY name`, tenantID)
	if err != nil {
		return nil, dbError(err, "credential: list")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (tenant.Credential, error) {
		var c tenant.Credential
		err := r.Scan(&c.ID, &c.Name, &c.Provider, &c.CreatedAt)
		return c, err
	})
	if err != nil {
		return nil, dbError(err, "credential: list")
	}
	if out == nil {
		out = []tenant.Credential{}
	}
	return out, nil
}

// CredentialGet returns the tenant's credential id (without its key), or
// tenant.ErrCredentialNotFound.
func (s *Credentials) CredentialGet(ctx context.Context, tenantID, id uuid.UUID) (tenant.Credential, error) {
	return credentialFind(ctx, s.pool, tenantID, id.String())
}

// CredentialDelete deletes the tenant's credential id: its key is gone from the database, and
// the next model call of a preset naming it fails (INVALID_CREDENTIAL).
func (s *Credentials) CredentialDelete(ctx context.Context, tenantID, id uuid.UUID) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM credentials WHERE id = $1 AND tenant_id = $2`, id, tenantID)
	if err != nil {
		return dbError(err, "credential: delete")
	}
	if tag.RowsAffected() == 0 {
		return tenant.ErrCredentialNotFound
	}
	return nil
}

// CredentialResolve returns the tenant's credential named ref (its name, or its id) with its
// decrypted key, for a model call. It fails with tenant.ErrCredentialNotFound,
// tenant.ErrCredentialsDisabled, or an error of secretbox when the key does not decrypt (a key
// encryption key that was removed before the rewrap); no error carries key material.
func (s *Credentials) CredentialResolve(ctx context.Context, tenantID uuid.UUID, ref string) (tenant.CredentialSecret, error) {
	if !s.Enabled() {
		return tenant.CredentialSecret{}, tenant.ErrCredentialsDisabled
	}
	var c tenant.CredentialSecret
	var sealed secretbox.Sealed
	id, _ := uuid.Parse(ref) // uuid.Nil when ref is a name; names are never UUIDs
	err := s.pool.QueryRow(ctx, `SELECT id, name, provider, created_at, kek_id, wrapped_key, ciphertext
		FROM credentials WHERE tenant_id = $1 AND (id = $2 OR name = $3)`, tenantID, id, ref).
		Scan(&c.ID, &c.Name, &c.Provider, &c.CreatedAt, &sealed.KeyID, &sealed.WrappedKey, &sealed.Ciphertext)
	if errors.Is(err, pgx.ErrNoRows) {
		return tenant.CredentialSecret{}, tenant.ErrCredentialNotFound
	}
	if err != nil {
		return tenant.CredentialSecret{}, dbError(err, "credential: resolve")
	}
	key, err := s.keys.Open(sealed, tenant.CredentialAAD(tenantID, c.ID))
	if err != nil {
		return tenant.CredentialSecret{}, fmt.Errorf("credential %s: %w", c.ID, err)
	}
	c.APIKey = string(key)
	return c, nil
}

// RewrapResult counts what Rewrap did.
type RewrapResult struct {
	Rewrapped int // data keys now wrapped by the active key that were not before
	Current   int // data keys that already were
	Failed    int // data keys that did not unwrap (their key is not in the keyring, or corrupted)
	// Failures name each credential that did not unwrap (ids and key ids only, never a secret),
	// in id order.
	Failures []RewrapFailure
}

// RewrapFailure is a credential whose data key did not unwrap: to delete, or to keep its key for.
type RewrapFailure struct {
	CredentialID uuid.UUID
	TenantID     uuid.UUID
	KeyID        string // the key encryption key the row names
	Reason       string // ErrUnknownKey's or ErrOpen's text
}

// Rewrap wraps the data key of every stored credential with the keyring's active key (operator
// key rotation, docs/credentials-and-keys.md). The ciphertexts stay as they are. A credential
// that fails to unwrap is counted and skipped; the error then reports how many failed, and the
// old key must stay configured until they are dealt with. Safe to run while replicas serve, and
// more than once.
func (s *Credentials) Rewrap(ctx context.Context) (RewrapResult, error) {
	var res RewrapResult
	if !s.Enabled() {
		return res, tenant.ErrCredentialsDisabled
	}
	type row struct {
		id, tenantID uuid.UUID
		sealed       secretbox.Sealed
	}
	rows, err := s.pool.Query(ctx, `SELECT id, tenant_id, kek_id, wrapped_key FROM credentials ORDER BY id`)
	if err != nil {
		return res, dbError(err, "credential: rewrap")
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.id, &x.tenantID, &x.sealed.KeyID, &x.sealed.WrappedKey)
		return x, err
	})
	if err != nil {
		return res, dbError(err, "credential: rewrap")
	}
	for _, x := range all {
		next, changed, err := s.keys.Rewrap(x.sealed, tenant.CredentialAAD(x.tenantID, x.id))
		switch {
		case err != nil:
			res.Failed++
			res.Failures = append(res.Failures, RewrapFailure{CredentialID: x.id, TenantID: x.tenantID,
				KeyID: x.sealed.KeyID, Reason: rewrapReason(err)})
			continue
		case !changed:
			res.Current++
			continue
		}
		// Only the row as read is replaced: a concurrent rewrap of it is not undone.
		tag, err := s.pool.Exec(ctx, `UPDATE credentials SET kek_id = $3, wrapped_key = $4
			WHERE id = $1 AND kek_id = $2`, x.id, x.sealed.KeyID, next.KeyID, next.WrappedKey)
		if err != nil {
			return res, dbError(err, "credential: rewrap")
		}
		if tag.RowsAffected() == 1 {
			res.Rewrapped++
		} else {
			res.Current++
		}
	}
	if res.Failed > 0 {
		return res, fmt.Errorf("credential: rewrap: %d credentials did not unwrap with the configured keys", res.Failed)
	}
	return res, nil
}

// rewrapReason says why a data key did not unwrap, in words of secretbox's errors (which never
// carry a secret).
func rewrapReason(err error) string {
	switch {
	case errors.Is(err, secretbox.ErrUnknownKey):
		return "its key is not configured"
	case errors.Is(err, secretbox.ErrOpen):
		return "it does not authenticate (corrupted, or moved)"
	}
	return "it does not unwrap"
}

// queryRower is what credentialFind needs from a pool or a transaction.
type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// credentialFind returns the tenant's credential named ref (name or id), without its key.
func credentialFind(ctx context.Context, db queryRower, tenantID uuid.UUID, ref string) (tenant.Credential, error) {
	var c tenant.Credential
	id, _ := uuid.Parse(ref)
	err := db.QueryRow(ctx, `SELECT id, name, provider, created_at FROM credentials
		WHERE tenant_id = $1 AND (id = $2 OR name = $3)`, tenantID, id, ref).
		Scan(&c.ID, &c.Name, &c.Provider, &c.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return tenant.Credential{}, tenant.ErrCredentialNotFound
	}
	if err != nil {
		return tenant.Credential{}, dbError(err, "credential: get")
	}
	return c, nil
}
