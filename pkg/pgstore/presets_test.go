package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dshd/dshd/internal/pgtest"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/preset"
)

// storeWithTenants returns a preset store and two tenants on a fresh database.
func storeWithTenants(t *testing.T) (*pgstore.Presets, uuid.UUID, uuid.UUID) {
	t.Helper()
	pool := pgtest.Pool(t)
	tenants := pgstore.NewTenants(pool)
	a, _, err := tenants.TenantCreate(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := tenants.TenantCreate(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	return pgstore.NewPresets(pool, preset.Rules{}), a.ID, b.ID
}

func TestPresetVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, tn, _ := storeWithTenants(t)
	p1, err := s.PresetCreate(ctx, tn, body(t, `{"name":"one","model":{"provider":"scripted","model":"m1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p1.Version != 1 || p1.Tools.Mode != preset.ModeNative {
		t.Fatalf("created %+v", p1)
	}
	p2, err := s.PresetUpdate(ctx, tn, p1.ID, body(t, `{"name":"two","model":{"provider":"scripted","model":"m2"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p2.Version != 2 || p2.Name != "two" || !p2.CreatedAt.Equal(p1.CreatedAt) {
		t.Fatalf("updated %+v", p2)
	}
	cur, err := s.PresetGet(ctx, tn, p1.ID)
	if err != nil || cur.Version != 2 || cur.Model.Model != "m2" {
		t.Fatalf("PresetGet = %+v, %v", cur, err)
	}
	old, err := s.PresetVersionGet(ctx, tn, p1.ID, 1)
	if err != nil || old.Version != 1 || old.Name != "one" || old.Model.Model != "m1" {
		t.Fatalf("PresetVersionGet(1) = %+v, %v", old, err)
	}
	if err := s.PresetDelete(ctx, tn, p1.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PresetGet(ctx, tn, p1.ID); !errors.Is(err, preset.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if _, err := s.PresetUpdate(ctx, tn, p1.ID, body(t, `{"name":"x","model":{"provider":"scripted","model":"m"}}`)); !errors.Is(err, preset.ErrNotFound) {
		t.Fatalf("update after delete: %v", err)
	}
	if v, err := s.PresetVersionGet(ctx, tn, p1.ID, 2); err != nil || v.Name != "two" {
		t.Fatalf("a pinned version must stay readable after delete: %+v, %v", v, err)
	}
	if err := s.PresetDelete(ctx, tn, p1.ID); !errors.Is(err, preset.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

func TestPresetRejectsInvalidWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, tn, _ := storeWithTenants(t)
	bad := body(t, `{"name":"n","model":{"provider":"scripted","model":"m"},"tools":{"mode":"nope"}}`)
	var ve *preset.ValidationError
	if _, err := s.PresetCreate(ctx, tn, bad); !errors.As(err, &ve) {
		t.Fatalf("create: %v", err)
	}
	p, err := s.PresetCreate(ctx, tn, body(t, `{"name":"n","model":{"provider":"scripted","model":"m"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PresetUpdate(ctx, tn, p.ID, bad); !errors.As(err, &ve) {
		t.Fatalf("update: %v", err)
	}
	if cur, _ := s.PresetGet(ctx, tn, p.ID); cur.Version != 1 {
		t.Fatalf("a rejected update wrote version %d", cur.Version)
	}
}

func TestPresetTenantIsolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, a, b := storeWithTenants(t)
	p, err := s.PresetCreate(ctx, a, body(t, `{"name":"n","model":{"provider":"scripted","model":"m"}}`))
	if err != nil {
		t.Fatal(err)
	}
	nb := body(t, `{"name":"x","model":{"provider":"scripted","model":"m"}}`)
	for name, err := range map[string]error{
		"get":     func() error { _, err := s.PresetGet(ctx, b, p.ID); return err }(),
		"version": func() error { _, err := s.PresetVersionGet(ctx, b, p.ID, 1); return err }(),
		"update":  func() error { _, err := s.PresetUpdate(ctx, b, p.ID, nb); return err }(),
		"delete":  s.PresetDelete(ctx, b, p.ID),
	} {
		if !errors.Is(err, preset.ErrNotFound) {
			t.Errorf("%s by another tenant: %v; want ErrNotFound", name, err)
		}
	}
	items, _, err := s.PresetList(ctx, b, "", 10)
	if err != nil || len(items) != 0 {
		t.Fatalf("other tenant lists %d presets, %v", len(items), err)
	}
	if got, err := s.PresetGet(ctx, a, p.ID); err != nil || got.Version != 1 {
		t.Fatalf("owner's preset changed: %+v, %v", got, err)
	}
}

func TestPresetListPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, tn, _ := storeWithTenants(t)
	want := map[uuid.UUID]bool{}
	for range 7 {
		p, err := s.PresetCreate(ctx, tn, body(t, `{"name":"n","model":{"provider":"scripted","model":"m"}}`))
		if err != nil {
			t.Fatal(err)
		}
		want[p.ID] = true
	}
	seen := map[uuid.UUID]bool{}
	cursor, pages := "", 0
	for {
		items, next, err := s.PresetList(ctx, tn, cursor, 3)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, p := range items {
			if seen[p.ID] || !want[p.ID] {
				t.Fatalf("page %d: unexpected or repeated preset %s", pages, p.ID)
			}
			seen[p.ID] = true
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(seen) != 7 || pages != 3 {
		t.Fatalf("saw %d presets in %d pages; want 7 in 3", len(seen), pages)
	}
	for _, c := range []string{"!!", "bm90LWEtY3Vyc29y"} {
		if _, _, err := s.PresetList(ctx, tn, c, 3); !errors.Is(err, preset.ErrInvalidCursor) {
			t.Errorf("cursor %q: %v", c, err)
		}
	}
}

func body(t *testing.T, js string) preset.Body {
	t.Helper()
	var b preset.Body
	if err := json.Unmarshal([]byte(js), &b); err != nil {
		t.Fatalf("bad test JSON %s: %v", js, err)
	}
	return b
}

// A pinned version read once is served again without the database (every turn of a session reads
// its version), but still only to its tenant, and never as a value shared with the caller before.
func TestPresetVersionReadOnceServedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tenants := pgstore.NewTenants(pool)
	a, _, err := tenants.TenantCreate(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := tenants.TenantCreate(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	s := pgstore.NewPresets(pool, preset.Rules{})
	p, err := s.PresetCreate(ctx, a.ID, body(t, `{"name":"one","model":{"provider":"scripted","model":"m1"},"tools":{"allow":["read"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PresetUpdate(ctx, a.ID, p.ID, body(t, `{"name":"two","model":{"provider":"scripted","model":"m2"}}`)); err != nil {
		t.Fatal(err)
	}
	first, err := s.PresetVersionGet(ctx, a.ID, p.ID, 1)
	if err != nil || first.Name != "one" || len(first.Tools.Allow) != 1 {
		t.Fatalf("PresetVersionGet(1) = %+v, %v", first, err)
	}
	// The caller owns what it was given.
	first.Name = "changed"
	first.Tools.Allow[0] = "changed"
	if _, err := s.PresetVersionGet(ctx, b.ID, p.ID, 1); !errors.Is(err, preset.ErrNotFound) {
		t.Fatalf("another tenant's read of a version read before: %v; want ErrNotFound", err)
	}
	if err := s.PresetDelete(ctx, a.ID, p.ID); err != nil {
		t.Fatal(err)
	}
	pool.Close() // from here on only what was read before can be served
	again, err := s.PresetVersionGet(ctx, a.ID, p.ID, 1)
	if err != nil || again.Name != "one" || again.Version != 1 || again.Model.Model != "m1" ||
		len(again.Tools.Allow) != 1 || again.Tools.Allow[0] != "read" || !again.CreatedAt.Equal(p.CreatedAt) {
		t.Fatalf("version 1 read again = %+v, %v; want it as stored", again, err)
	}
	if _, err := s.PresetVersionGet(ctx, a.ID, p.ID, 2); err == nil {
		t.Fatal("version 2, never read, was served without the database")
	}
	if _, err := s.PresetVersionGet(ctx, b.ID, p.ID, 1); errors.Is(err, preset.ErrNotFound) || err == nil {
		t.Fatalf("another tenant's read must go to the database (closed): %v", err)
	}
}
