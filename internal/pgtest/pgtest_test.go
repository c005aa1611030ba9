package pgtest_test

import (
	"context"
	"testing"

	"github.com/dshd/dshd/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestPoolIsMigratedAndIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := pgtest.Pool(t), pgtest.Pool(t)
	if _, err := a.Exec(ctx, `INSERT INTO tenants (id, name) VALUES (gen_random_uuid(), 'a')`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRow(ctx, `SELECT count(*) FROM tenants`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("databases are not isolated: %d tenants in a fresh database", n)
	}
	if err := a.QueryRow(ctx, `SELECT count(*) FROM tenants`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("count = %d, %v; want 1", n, err)
	}
}
