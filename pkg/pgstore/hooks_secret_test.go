package pgstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/secretbox"
)

func testKeyring(t *testing.T, ids ...string) *secretbox.Keyring {
	t.Helper()
	keys := make([][]byte, len(ids))
	for i, id := range ids {
		keys[i] = bytes.Repeat([]byte(id[:1]), 32)
	}
	k, err := secretbox.NewKeyring(ids, keys)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestWebhookSecretsSealedAtRest: with a keyring, a signing secret is stored sealed (never as
// it is) and claims open it; the rewrap seals secrets stored before a keyring was configured and
// moves sealed ones to the active key, after which the old key can go; a server without the
// sealing key sends nothing and says why.
func TestWebhookSecretsSealedAtRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool, tenant := newStore(t, pgstore.StoreConfig{})
	hooks := func(k *secretbox.Keyring) *pgstore.Webhooks {
		return pgstore.NewStore(pool, pgstore.StoreConfig{SecretKeys: k}).Webhooks()
	}
	secret := func() []byte {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		return b
	}
	plainSecret, sealedSecret := secret(), secret()
	plain, err := hooks(nil).WebhookCreate(ctx, tenant, "https://example.com/a", pgstore.WebhookEventTypes, "", plainSecret, 10)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := hooks(testKeyring(t, "a")).WebhookCreate(ctx, tenant, "https://example.com/b", pgstore.WebhookEventTypes, "", sealedSecret, 10)
	if err != nil {
		t.Fatal(err)
	}
	stored := func(id uuid.UUID) (secret []byte, kek *string) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT secret, kek_id FROM webhook_endpoints WHERE id = $1`, id).Scan(&secret, &kek); err != nil {
			t.Fatal(err)
		}
		return secret, kek
	}
	if s, kek := stored(sealed.ID); bytes.Contains(s, sealedSecret) || kek == nil || *kek != "a" {
		t.Fatalf("sealed row: kek %v, secret stored as it is: %v", kek, bytes.Contains(s, sealedSecret))
	}
	// One due delivery per endpoint; claim them with a keyring and check the secrets.
	claim := func(h *pgstore.Webhooks) map[string]pgstore.WebhookAttempt {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO webhook_deliveries (id, endpoint_id, tenant_id, event_id, event_type, payload)
			SELECT gen_random_uuid(), id, tenant_id, gen_random_uuid()::text, 'turn.completed', '{}' FROM webhook_endpoints`); err != nil {
			t.Fatal(err)
		}
		got, err := h.WebhookClaim(ctx, 10, time.Minute, 5, 100)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]pgstore.WebhookAttempt{}
		for _, a := range got {
			out[a.URL] = a
		}
		if len(out) != 2 {
			t.Fatalf("claimed %d deliveries, want 2", len(out))
		}
		return out
	}
	got := claim(hooks(testKeyring(t, "a")))
	if a, b := got["https://example.com/a"], got["https://example.com/b"]; !bytes.Equal(a.Secret, plainSecret) ||
		!bytes.Equal(b.Secret, sealedSecret) || a.SecretErr != nil || b.SecretErr != nil {
		t.Fatalf("claimed secrets do not match: %v %v", a.SecretErr, b.SecretErr)
	}
	// Rotation: b is added first, the rewrap moves both rows to it, then a goes.
	res, err := hooks(testKeyring(t, "b", "a")).WebhookRewrap(ctx)
	if err != nil || res.Rewrapped != 2 {
		t.Fatalf("rewrap: %+v, %v", res, err)
	}
	for _, id := range []uuid.UUID{plain.ID, sealed.ID} {
		if s, kek := stored(id); kek == nil || *kek != "b" || bytes.Contains(s, plainSecret) || bytes.Contains(s, sealedSecret) {
			t.Fatalf("row %s after the rewrap: kek %v", id, kek)
		}
	}
	if res, err := hooks(testKeyring(t, "b", "a")).WebhookRewrap(ctx); err != nil || res.Current != 2 || res.Rewrapped != 0 {
		t.Fatalf("a second rewrap: %+v, %v", res, err)
	}
	got = claim(hooks(testKeyring(t, "b")))
	if a, b := got["https://example.com/a"], got["https://example.com/b"]; !bytes.Equal(a.Secret, plainSecret) || !bytes.Equal(b.Secret, sealedSecret) {
		t.Fatal("after the rotation the secrets do not open with the new key alone")
	}
	got = claim(hooks(testKeyring(t, "a")))
	for url, a := range got {
		if a.SecretErr == nil || a.Secret != nil {
			t.Fatalf("%s claimed without the sealing key: secret %v, error %v", url, a.Secret != nil, a.SecretErr)
		}
	}
}
