package pgstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/dshd/dshd/internal/pgtest"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/secretbox"
	"github.com/dshd/dshd/pkg/tenant"
)

func keyringOf(t *testing.T, ids ...string) (*secretbox.Keyring, map[string]string) {
	t.Helper()
	keys := map[string]string{}
	for _, id := range ids {
		raw := make([]byte, secretbox.KeySize)
		_, _ = rand.Read(raw)
		keys[id] = base64.StdEncoding.EncodeToString(raw)
	}
	return keyring(t, keys, ids...), keys
}

// keyring builds a keyring of the named keys of keys, in order.
func keyring(t *testing.T, keys map[string]string, ids ...string) *secretbox.Keyring {
	t.Helper()
	spec := ""
	for i, id := range ids {
		if i > 0 {
			spec += ","
		}
		spec += id + ":" + keys[id]
	}
	k, err := secretbox.ParseKeyring(spec)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestCredentialsStoreEncryptedAndResolve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	tenants := pgstore.NewTenants(pool)
	a, _, _ := tenants.TenantCreate(ctx, "a")
	b, _, _ := tenants.TenantCreate(ctx, "b")
	ring, _ := keyringOf(t, "k1")
	s := pgstore.NewCredentials(pool, ring)
	const secret = "sk-tenant-a-0123456789"
	c, err := s.CredentialCreate(ctx, a.ID, tenant.CredentialSpec{Name: "prod", Provider: "deepseek", APIKey: " " + secret + " "})
	if err != nil || c.Name != "prod" || c.Provider != "deepseek" || c.CreatedAt.IsZero() {
		t.Fatalf("create = %+v, %v", c, err)
	}
	// The database holds no plaintext.
	var kek string
	var wrapped, ct []byte
	if err := pool.QueryRow(ctx, `SELECT kek_id, wrapped_key, ciphertext FROM credentials WHERE id = $1`, c.ID).
		Scan(&kek, &wrapped, &ct); err != nil {
		t.Fatal(err)
	}
	if kek != "k1" || bytes.Contains(ct, []byte(secret)) || bytes.Contains(wrapped, []byte(secret)) {
		t.Fatalf("stored kek %q, ciphertext holds the secret: %v", kek, bytes.Contains(ct, []byte(secret)))
	}
	for _, ref := range []string{"prod", c.ID.String()} {
		got, err := s.CredentialResolve(ctx, a.ID, ref)
		if err != nil || got.APIKey != secret || got.ID != c.ID {
			t.Fatalf("resolve %q = %v, %v", ref, got, err)
		}
	}
	// Another tenant sees nothing of it.
	if _, err := s.CredentialResolve(ctx, b.ID, "prod"); !errors.Is(err, tenant.ErrCredentialNotFound) {
		t.Fatalf("other tenant resolve: %v", err)
	}
	if _, err := s.CredentialGet(ctx, b.ID, c.ID); !errors.Is(err, tenant.ErrCredentialNotFound) {
		t.Fatalf("other tenant get: %v", err)
	}
	if err := s.CredentialDelete(ctx, b.ID, c.ID); !errors.Is(err, tenant.ErrCredentialNotFound) {
		t.Fatalf("other tenant delete: %v", err)
	}
	// A row copied to another tenant (same id, same sealed bytes) does not decrypt there: the
	// AAD binds it to its tenant.
	if _, err := pool.Exec(ctx, `UPDATE credentials SET tenant_id = $2 WHERE id = $1`, c.ID, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CredentialResolve(ctx, b.ID, "prod"); !errors.Is(err, secretbox.ErrOpen) {
		t.Fatalf("moved row resolve = %v, want ErrOpen", err)
	}
	if _, err := pool.Exec(ctx, `UPDATE credentials SET tenant_id = $2 WHERE id = $1`, c.ID, a.ID); err != nil {
		t.Fatal(err)
	}
	// Names are unique per tenant; bad specs are refused without echoing the key.
	if _, err := s.CredentialCreate(ctx, a.ID, tenant.CredentialSpec{Name: "prod", Provider: "openai", APIKey: "x"}); !errors.Is(err, tenant.ErrCredentialExists) {
		t.Fatalf("duplicate name: %v", err)
	}
	if _, err := s.CredentialCreate(ctx, b.ID, tenant.CredentialSpec{Name: "prod", Provider: "openai", APIKey: "x"}); err != nil {
		t.Fatalf("same name in another tenant: %v", err)
	}
	for _, spec := range []tenant.CredentialSpec{
		{Name: "", Provider: "openai", APIKey: "secret-zz9"},
		{Name: uuid.NewString(), Provider: "openai", APIKey: "secret-zz9"},
		{Name: "has space", Provider: "openai", APIKey: "secret-zz9"},
		{Name: "x", Provider: "scripted", APIKey: "secret-zz9"},
		{Name: "x", Provider: "openai", APIKey: ""},
		{Name: "x", Provider: "openai", APIKey: "two words-zz9"},
	} {
		_, err := s.CredentialCreate(ctx, a.ID, spec)
		if fault.Code(err) != fault.Invalid {
			t.Errorf("spec %+v: %v", spec.Name, err)
		}
		if err != nil && spec.APIKey != "" && bytes.Contains([]byte(err.Error()), []byte(spec.APIKey)) {
			t.Errorf("error %q echoes the key", err)
		}
	}
	list, err := s.CredentialList(ctx, a.ID)
	if err != nil || len(list) != 1 || list[0].ID != c.ID {
		t.Fatalf("list = %+v, %v", list, err)
	}
	if err := s.CredentialDelete(ctx, a.ID, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CredentialResolve(ctx, a.ID, "prod"); !errors.Is(err, tenant.ErrCredentialNotFound) {
		t.Fatalf("resolve after delete: %v", err)
	}
	// Without a keyring nothing is stored or resolved; listing still works.
	off := pgstore.NewCredentials(pool, nil)
	if _, err := off.CredentialCreate(ctx, a.ID, tenant.CredentialSpec{Name: "x", Provider: "openai", APIKey: "k"}); !errors.Is(err, tenant.ErrCredentialsDisabled) {
		t.Fatalf("disabled create: %v", err)
	}
	if _, err := off.CredentialResolve(ctx, b.ID, "prod"); !errors.Is(err, tenant.ErrCredentialsDisabled) {
		t.Fatalf("disabled resolve: %v", err)
	}
	if l, err := off.CredentialList(ctx, b.ID); err != nil || len(l) != 1 {
		t.Fatalf("disabled list: %v, %v", l, err)
	}
}

// TestCredentialsSurviveOperatorKeyRotation: credentials stored under key A; the operator puts B
// first and rewraps; with A removed every credential still resolves to its key.
func TestCredentialsSurviveOperatorKeyRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	tenants := pgstore.NewTenants(pool)
	tn, _, _ := tenants.TenantCreate(ctx, "a")
	_, keys := keyringOf(t, "A", "B")
	underA := pgstore.NewCredentials(pool, keyring(t, keys, "A"))
	secrets := map[string]string{"one": "key-one-aaaa", "two": "key-two-bbbb", "three": "key-three-cccc"}
	for name, secret := range secrets {
		if _, err := underA.CredentialCreate(ctx, tn.ID, tenant.CredentialSpec{Name: name, Provider: "openai", APIKey: secret}); err != nil {
			t.Fatal(err)
		}
	}
	var before [][]byte
	rows, _ := pool.Query(ctx, `SELECT ciphertext FROM credentials ORDER BY id`)
	for rows.Next() {
		var ct []byte
		_ = rows.Scan(&ct)
		before = append(before, ct)
	}
	rows.Close()

	onlyB := pgstore.NewCredentials(pool, keyring(t, keys, "B"))
	if _, err := onlyB.CredentialResolve(ctx, tn.ID, "one"); !errors.Is(err, secretbox.ErrUnknownKey) {
		t.Fatalf("resolve under B before the rewrap = %v, want ErrUnknownKey", err)
	}
	res, err := onlyB.Rewrap(ctx)
	if err == nil || res.Failed != 3 || len(res.Failures) != 3 {
		t.Fatalf("rewrap without the old key = %+v, %v; want 3 failed and an error", res, err)
	}
	// The failures are named (credential, tenant, key id), and say nothing secret.
	for _, f := range res.Failures {
		if f.TenantID != tn.ID || f.KeyID != "A" || f.CredentialID == uuid.Nil || f.Reason == "" {
			t.Errorf("failure %+v", f)
		}
		for _, secret := range secrets {
			if strings.Contains(fmt.Sprintf("%+v", f), secret) {
				t.Errorf("failure %+v shows a key", f)
			}
		}
	}
	both := pgstore.NewCredentials(pool, keyring(t, keys, "B", "A"))
	res, err = both.Rewrap(ctx)
	if err != nil || res.Rewrapped != 3 || res.Failed != 0 {
		t.Fatalf("rewrap = %+v, %v", res, err)
	}
	if res, err := both.Rewrap(ctx); err != nil || res.Rewrapped != 0 || res.Current != 3 {
		t.Fatalf("second rewrap = %+v, %v", res, err)
	}
	var underOld int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM credentials WHERE kek_id <> 'B'`).Scan(&underOld)
	if underOld != 0 {
		t.Fatalf("%d credentials still wrapped by A", underOld)
	}
	// Only the wrapped data keys changed: the ciphertexts are the same bytes.
	rows, _ = pool.Query(ctx, `SELECT ciphertext FROM credentials ORDER BY id`)
	for i := 0; rows.Next(); i++ {
		var ct []byte
		_ = rows.Scan(&ct)
		if !bytes.Equal(ct, before[i]) {
			t.Errorf("ciphertext %d changed", i)
		}
	}
	rows.Close()
	for name, secret := range secrets {
		got, err := onlyB.CredentialResolve(ctx, tn.ID, name)
		if err != nil || got.APIKey != secret {
			t.Fatalf("resolve %s after rotation = %v, %v", name, got, err)
		}
	}
}

// TestPresetCredentialCheckedAtWrite: a preset may name only a credential of its tenant, for its
// provider.
func TestPresetCredentialCheckedAtWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	tenants := pgstore.NewTenants(pool)
	a, _, _ := tenants.TenantCreate(ctx, "a")
	b, _, _ := tenants.TenantCreate(ctx, "b")
	ring, _ := keyringOf(t, "k")
	creds := pgstore.NewCredentials(pool, ring)
	c, err := creds.CredentialCreate(ctx, a.ID, tenant.CredentialSpec{Name: "mine", Provider: "openai", APIKey: "k-1"})
	if err != nil {
		t.Fatal(err)
	}
	presets := pgstore.NewPresets(pool, preset.Rules{ModelHosts: []string{"*"}})
	body := func(provider, cred string) preset.Body {
		return preset.Body{Name: "p", Model: preset.Model{Provider: provider, Model: "m", BaseURL: "https://llm.example/v1", Credential: cred}}
	}
	for _, ref := range []string{"mine", c.ID.String()} {
		p, err := presets.PresetCreate(ctx, a.ID, body("openai", ref))
		if err != nil || p.Model.Credential != ref {
			t.Fatalf("create naming %q = %+v, %v", ref, p.Model, err)
		}
	}
	if _, err := presets.PresetCreate(ctx, b.ID, body("openai", "mine")); fault.Code(err) != tenant.CodeUnknownCredential {
		t.Fatalf("another tenant's credential: %v", err)
	}
	if _, err := presets.PresetCreate(ctx, a.ID, body("openai", "nope")); fault.Code(err) != tenant.CodeUnknownCredential {
		t.Fatalf("unknown credential: %v", err)
	}
	if _, err := presets.PresetCreate(ctx, a.ID, body("deepseek", "mine")); fault.Code(err) != fault.Invalid {
		t.Fatalf("another provider's credential: %v", err)
	}
	sc := preset.Body{Name: "p", Model: preset.Model{Provider: "scripted", Model: "m", Credential: "mine"}}
	if _, err := presets.PresetCreate(ctx, a.ID, sc); fault.Code(err) != fault.Invalid {
		t.Fatalf("scripted with a credential: %v", err)
	}
	p, _ := presets.PresetCreate(ctx, a.ID, body("openai", ""))
	if _, err := presets.PresetUpdate(ctx, a.ID, p.ID, body("openai", "nope")); fault.Code(err) != tenant.CodeUnknownCredential {
		t.Fatalf("update naming an unknown credential: %v", err)
	}
}
