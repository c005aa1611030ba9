package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/dshd/dshd/internal/pgtest"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/tenant"
)

func TestTenantCreateAndKeyAuthenticate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	s := pgstore.NewTenants(pool)

	tn, key, err := s.TenantCreate(ctx, "  acme  ")
	if err != nil {
		t.Fatal(err)
	}
	if tn.Name != "acme" || tn.ID == uuid.Nil || tn.CreatedAt.IsZero() {
		t.Fatalf("tenant = %+v", tn)
	}
	if !strings.HasPrefix(key, tenant.KeyPrefix) || len(key) != len(tenant.KeyPrefix)+43 {
		t.Fatalf("key %q has the wrong shape", key)
	}
	got, err := s.KeyAuthenticate(ctx, key)
	if err != nil || got != tn.ID {
		t.Fatalf("KeyAuthenticate = %v, %v; want %v", got, err, tn.ID)
	}
	var hashed int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM api_keys
		WHERE tenant_id = $1 AND key_hash = sha256(convert_to($2, 'UTF8')) AND length(prefix) < 20`,
		tn.ID, key).Scan(&hashed); err != nil || hashed != 1 {
		t.Fatalf("the key is not stored as its SHA-256 hash (%d rows, %v)", hashed, err)
	}
	back, err := s.TenantGet(ctx, tn.ID)
	if err != nil || back.Name != "acme" {
		t.Fatalf("TenantGet = %+v, %v", back, err)
	}
}

func TestKeyAuthenticateRejectsUnknownAndRevoked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgstore.NewTenants(pgtest.Pool(t))
	tn, key, err := s.TenantCreate(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.KeyCreate(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "nope", tenant.KeyPrefix + "x", key + "x"} {
		if _, err := s.KeyAuthenticate(ctx, bad); !errors.Is(err, tenant.ErrNotFound) {
			t.Errorf("KeyAuthenticate(%q) = %v; want ErrNotFound", bad, err)
		}
	}
	if err := s.KeyRevoke(ctx, tn.ID, key); err != nil {
		t.Fatal(err)
	}
	if _, err := s.KeyAuthenticate(ctx, key); !errors.Is(err, tenant.ErrNotFound) {
		t.Fatalf("revoked key authenticates: %v", err)
	}
	if id, err := s.KeyAuthenticate(ctx, second); err != nil || id != tn.ID {
		t.Fatalf("second key = %v, %v", id, err)
	}
}

func TestTenantErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgstore.NewTenants(pgtest.Pool(t))
	if _, _, err := s.TenantCreate(ctx, " "); !errors.Is(err, tenant.ErrInvalidName) {
		t.Errorf("empty name: %v", err)
	}
	if _, err := s.TenantGet(ctx, uuid.New()); !errors.Is(err, tenant.ErrNotFound) {
		t.Errorf("TenantGet(unknown) = %v", err)
	}
	if _, err := s.KeyCreate(ctx, uuid.New()); !errors.Is(err, tenant.ErrNotFound) {
		t.Errorf("KeyCreate(unknown tenant) = %v", err)
	}
}
