package secretbox_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/secretbox"
)

func newKey(t *testing.T) string {
	t.Helper()
	raw := make([]byte, secretbox.KeySize)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(raw)
}

func mustParse(t *testing.T, spec string) *secretbox.Keyring {
	t.Helper()
	k, err := secretbox.ParseKeyring(spec)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpenRoundTripAndAADBinding(t *testing.T) {
	k := mustParse(t, "a:"+newKey(t))
	secret := []byte("sk-tenant-secret-123")
	aad := []byte("tenant-1/cred-1")
	s, err := k.Seal(secret, aad)
	if err != nil {
		t.Fatal(err)
	}
	if s.KeyID != "a" || bytes.Contains(s.Ciphertext, secret) || bytes.Contains(s.WrappedKey, secret) {
		t.Fatalf("sealed %+v", s)
	}
	got, err := k.Open(s, aad)
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Open = %q, %v", got, err)
	}
	// Another owner (a row copied to another tenant), a flipped byte of either part: no plaintext.
	if _, err := k.Open(s, []byte("tenant-2/cred-1")); !errors.Is(err, secretbox.ErrOpen) {
		t.Errorf("Open with other aad = %v, want ErrOpen", err)
	}
	for _, mutate := range []func(*secretbox.Sealed){
		func(s *secretbox.Sealed) { s.Ciphertext[len(s.Ciphertext)-1] ^= 1 },
		func(s *secretbox.Sealed) { s.WrappedKey[len(s.WrappedKey)-1] ^= 1 },
		func(s *secretbox.Sealed) { s.Ciphertext = s.Ciphertext[:3] },
	} {
		c := secretbox.Sealed{KeyID: s.KeyID, WrappedKey: bytes.Clone(s.WrappedKey), Ciphertext: bytes.Clone(s.Ciphertext)}
		mutate(&c)
		if _, err := k.Open(c, aad); !errors.Is(err, secretbox.ErrOpen) {
			t.Errorf("Open of a corrupted value = %v, want ErrOpen", err)
		}
	}
	// Two seals of one secret share nothing (fresh data key and nonces).
	s2, _ := k.Seal(secret, aad)
	if bytes.Equal(s.Ciphertext, s2.Ciphertext) || bytes.Equal(s.WrappedKey, s2.WrappedKey) {
		t.Error("two seals are equal")
	}
}

func TestRotationRewrapsUnderTheNewKey(t *testing.T) {
	keyA, keyB := newKey(t), newKey(t)
	onlyA := mustParse(t, "A:"+keyA)
	aad := []byte("owner")
	var sealed []secretbox.Sealed
	for i := range 3 {
		s, err := onlyA.Seal([]byte(fmt.Sprintf("secret-%d", i)), aad)
		if err != nil {
			t.Fatal(err)
		}
		sealed = append(sealed, s)
	}
	// Step 1: B first, A still configured: old values open, new ones are wrapped by B.
	both := mustParse(t, "B:"+keyB+", A:"+keyA)
	if both.ActiveID() != "B" || strings.Join(both.IDs(), ",") != "B,A" {
		t.Fatalf("ids %v", both.IDs())
	}
	if _, err := both.Open(sealed[0], aad); err != nil {
		t.Fatal(err)
	}
	// Step 2: rewrap.
	for i, s := range sealed {
		r, changed, err := both.Rewrap(s, aad)
		if err != nil || !changed || r.KeyID != "B" || !bytes.Equal(r.Ciphertext, s.Ciphertext) {
			t.Fatalf("Rewrap = %+v, %v, %v", r, changed, err)
		}
		if _, again, err := both.Rewrap(r, aad); err != nil || again {
			t.Fatalf("second Rewrap changed=%v err=%v", again, err)
		}
		sealed[i] = r
	}
	// Step 3: A removed: every value still opens.
	onlyB := mustParse(t, "B:"+keyB)
	for i, s := range sealed {
		got, err := onlyB.Open(s, aad)
		if err != nil || string(got) != fmt.Sprintf("secret-%d", i) {
			t.Fatalf("Open after rotation = %q, %v", got, err)
		}
	}
	// A value still wrapped by A does not open without A, and says so without key material.
	old, _ := onlyA.Seal([]byte("x"), aad)
	_, err := onlyB.Open(old, aad)
	if !errors.Is(err, secretbox.ErrUnknownKey) || strings.Contains(err.Error(), keyA) {
		t.Errorf("Open under a removed key = %v", err)
	}
	if _, _, err := onlyB.Rewrap(old, aad); !errors.Is(err, secretbox.ErrUnknownKey) {
		t.Errorf("Rewrap under a removed key = %v", err)
	}
}

func TestParseKeyringRefusesBadSpecsWithoutEchoingKeys(t *testing.T) {
	good := newKey(t)
	short := base64.StdEncoding.EncodeToString([]byte("too short"))
	if k, err := secretbox.ParseKeyring("  "); k != nil || err != nil {
		t.Errorf("empty spec = %v, %v", k, err)
	}
	for _, spec := range []string{"nokey", "a:" + short, "a:!!notbase64!!", ":" + good, "a:" + good + ",a:" + good,
		"bad id:" + good, ","} {
		_, err := secretbox.ParseKeyring(spec)
		if err == nil {
			t.Errorf("%q accepted", spec)
			continue
		}
		if strings.Contains(err.Error(), good) || strings.Contains(err.Error(), short) {
			t.Errorf("error %q shows key material", err)
		}
	}
	raw, _ := base64.StdEncoding.DecodeString(good)
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if _, err := secretbox.ParseKeyring("k1:" + enc.EncodeToString(raw)); err != nil {
			t.Errorf("encoding %v refused: %v", enc, err)
		}
	}
	k := mustParse(t, "k1:"+good)
	if s := fmt.Sprintf("%v %+v %#v %s", k, k, k, k); strings.Contains(s, good) || !strings.Contains(s, "k1") {
		t.Errorf("formatted keyring %q", s)
	}
}

// TestKeyringErrorsNeverQuoteAnEntry: entries written the wrong way round, two keys in one entry,
// a short key, a repeated id: each is refused with an error that names the entry by position and
// quotes neither its id nor its key.
func TestKeyringErrorsNeverQuoteAnEntry(t *testing.T) {
	keyA, keyB := newKey(t), newKey(t)
	urlKey := base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, secretbox.KeySize))
	short := base64.StdEncoding.EncodeToString([]byte("too-short-secret"))
	for _, tc := range []struct {
		spec, entry string
		secrets     []string
	}{
		{"k0:" + keyB + "," + urlKey + ":k1", "entry 2", []string{urlKey, keyB}},
		{keyA + ":" + keyB, "entry 1", []string{keyA, keyB}},
		{urlKey + ":" + keyB, "entry 1", []string{urlKey, keyB}},
		{"k1:" + short, "entry 1", []string{short, "too-short"}},
		{"k1:" + keyA + ",k1:" + keyB, "entry 2", []string{keyA, keyB, "k1"}},
	} {
		_, err := secretbox.ParseKeyring(tc.spec)
		if err == nil {
			t.Errorf("%s: no error", tc.entry)
			continue
		}
		if !strings.Contains(err.Error(), tc.entry) {
			t.Errorf("error %q does not name %s", err, tc.entry)
		}
		for _, s := range tc.secrets {
			if strings.Contains(err.Error(), s) {
				t.Errorf("error %q quotes %q", err, s)
			}
		}
	}
}
