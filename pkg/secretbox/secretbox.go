// Package secretbox is envelope encryption for the secrets dshd stores for its tenants (their
// model provider keys): each secret is encrypted with its own random data key (DEK, AES-256-GCM),
// and the data key is wrapped (encrypted, AES-256-GCM) by one of the operator's key encryption
// keys (KEKs). A Sealed value records the id of the KEK that wrapped its data key, so a Keyring
// that holds several KEKs opens values wrapped by any of them, while new values are wrapped by the
// first (active) one. Rotating the operator key is: put a new key first, Rewrap every stored
// value (only the small wrapped DEK changes; the secret's ciphertext stays), then drop the old key.
//
// Both encryptions authenticate the caller's associated data (AAD), which binds a sealed value to
// where it is stored (for a credential: its tenant and id): a value copied to another row does
// not open there. Nothing in this package formats key material into an error or a log value.
//
// The package imports only the standard library.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
)

// KeySize is the size of every key: AES-256.
const KeySize = 32

// Errors of Open and Rewrap. Their messages never contain key material.
var (
	// ErrUnknownKey reports a value wrapped by a key id the keyring does not hold.
	ErrUnknownKey = errors.New("secretbox: the value is wrapped by a key that is not configured")
	// ErrOpen reports a value that does not authenticate: corrupted, or opened with other
	// associated data (another row) than it was sealed with.
	ErrOpen = errors.New("secretbox: the value does not authenticate (corrupted, or sealed for another owner)")
)

// Sealed is an encrypted secret as stored: the id of the key encryption key that wrapped its
// data key, the wrapped data key and the secret's ciphertext (each nonce || sealed bytes).
type Sealed struct {
	KeyID      string
	WrappedKey []byte
	Ciphertext []byte
}

// Keyring holds the operator's key encryption keys by id; the first is the active one, which
// wraps every new data key. It is immutable and safe for concurrent use.
type Keyring struct {
	ids  []string
	keys map[string]cipher.AEAD
}

var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// ParseKeyring reads a keyring from its configuration form, a comma-separated list of
// `id:base64key` entries, the active key first (for example DSHD_CREDENTIAL_KEYS). A key is 32
// bytes in standard or URL base64, padded or not. An empty spec gives a nil keyring and no error.
// Errors name the entry by its position only, never quoting it: an entry written the wrong way
// round (`<key>:<id>`) would otherwise print the key.
func ParseKeyring(spec string) (*Keyring, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, nil
	}
	k := &Keyring{keys: map[string]cipher.AEAD{}}
	for i, entry := range strings.Split(spec, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		id, b64, ok := strings.Cut(entry, ":")
		if !ok || !keyIDPattern.MatchString(id) {
			return nil, fmt.Errorf("entry %d: want id:base64key with an id of 1 to 64 letters, digits, '.', '_' or '-'", i+1)
		}
		if _, err := decodeKey(id); err == nil {
			// Two keys in one entry: the first would be stored (and logged) as a key id.
			return nil, fmt.Errorf("entry %d: its id is a key; want id:base64key", i+1)
		}
		raw, err := decodeKey(b64)
		if err != nil {
			return nil, fmt.Errorf("entry %d: the key %w", i+1, err)
		}
		if err := k.add(i+1, id, raw); err != nil {
			return nil, err
		}
	}
	if len(k.ids) == 0 {
		return nil, errors.New("no keys")
	}
	return k, nil
}

// NewKeyring returns a keyring of raw 32-byte keys in the order of ids, the first active.
func NewKeyring(ids []string, keys [][]byte) (*Keyring, error) {
	if len(ids) == 0 || len(ids) != len(keys) {
		return nil, errors.New("secretbox: want one key per id, at least one")
	}
	k := &Keyring{keys: map[string]cipher.AEAD{}}
	for i, id := range ids {
		if !keyIDPattern.MatchString(id) {
			return nil, fmt.Errorf("secretbox: key id %d is not 1 to 64 letters, digits, '.', '_' or '-'", i+1)
		}
		if err := k.add(i+1, id, keys[i]); err != nil {
			return nil, err
		}
	}
	return k, nil
}

func decodeKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if raw, err := enc.DecodeString(s); err == nil {
			if len(raw) != KeySize {
				return nil, fmt.Errorf("must be %d bytes, is %d", KeySize, len(raw))
			}
			return raw, nil
		}
	}
	return nil, errors.New("is not base64")
}

// add adds the key of entry n (counted from 1), which errors name.
func (k *Keyring) add(n int, id string, raw []byte) error {
	if _, dup := k.keys[id]; dup {
		return fmt.Errorf("entry %d: its key id appears in an earlier entry too", n)
	}
	aead, err := newAEAD(raw)
	if err != nil {
		return fmt.Errorf("entry %d: %w", n, err)
	}
	k.ids = append(k.ids, id)
	k.keys[id] = aead
	return nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("must be %d bytes", KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// ActiveID is the id of the key that wraps new data keys.
func (k *Keyring) ActiveID() string { return k.ids[0] }

// IDs are the key ids, the active one first.
func (k *Keyring) IDs() []string { return append([]string(nil), k.ids...) }

// LogValue shows a keyring in logs by its key ids only.
func (k *Keyring) LogValue() slog.Value { return slog.StringValue(k.String()) }

// String names the key ids only, never key material.
func (k *Keyring) String() string {
	if k == nil {
		return "secretbox.Keyring(none)"
	}
	return "secretbox.Keyring(" + strings.Join(k.ids, ",") + ")"
}

// GoString is String, so that %#v does not print the keys either.
func (k *Keyring) GoString() string { return k.String() }

// Seal encrypts plaintext under a fresh data key, wraps the data key with the active key, and
// binds both to aad.
func (k *Keyring) Seal(plaintext, aad []byte) (Sealed, error) {
	dek := make([]byte, KeySize)
	if _, err := rand.Read(dek); err != nil {
		return Sealed{}, err
	}
	defer clear(dek)
	data, err := newAEAD(dek)
	if err != nil {
		return Sealed{}, err
	}
	ct, err := seal(data, plaintext, aad)
	if err != nil {
		return Sealed{}, err
	}
	id := k.ActiveID()
	wrapped, err := seal(k.keys[id], dek, wrapAAD(id, aad))
	if err != nil {
		return Sealed{}, err
	}
	return Sealed{KeyID: id, WrappedKey: wrapped, Ciphertext: ct}, nil
}

// Open unwraps s's data key with the key it names and decrypts the secret; aad must be what it
// was sealed with. It fails with ErrUnknownKey or ErrOpen.
func (k *Keyring) Open(s Sealed, aad []byte) ([]byte, error) {
	dek, err := k.unwrap(s, aad)
	if err != nil {
		return nil, err
	}
	defer clear(dek)
	data, err := newAEAD(dek)
	if err != nil {
		return nil, ErrOpen
	}
	pt, err := open(data, s.Ciphertext, aad)
	if err != nil {
		return nil, ErrOpen
	}
	return pt, nil
}

// Rewrap returns s with its data key wrapped by the active key, and whether that changed
// anything (false when s is already wrapped by it). The ciphertext is kept as it is; the data
// key must unwrap with aad.
func (k *Keyring) Rewrap(s Sealed, aad []byte) (Sealed, bool, error) {
	if s.KeyID == k.ActiveID() {
		if _, err := k.unwrap(s, aad); err != nil {
			return s, false, err
		}
		return s, false, nil
	}
	dek, err := k.unwrap(s, aad)
	if err != nil {
		return s, false, err
	}
	defer clear(dek)
	id := k.ActiveID()
	wrapped, err := seal(k.keys[id], dek, wrapAAD(id, aad))
	if err != nil {
		return s, false, err
	}
	return Sealed{KeyID: id, WrappedKey: wrapped, Ciphertext: s.Ciphertext}, true, nil
}

func (k *Keyring) unwrap(s Sealed, aad []byte) ([]byte, error) {
	kek, ok := k.keys[s.KeyID]
	if !ok {
		return nil, fmt.Errorf("%w (key id %q)", ErrUnknownKey, s.KeyID)
	}
	dek, err := open(kek, s.WrappedKey, wrapAAD(s.KeyID, aad))
	if err != nil || len(dek) != KeySize {
		return nil, ErrOpen
	}
	return dek, nil
}

// wrapAAD binds a wrapped data key to the id of the key that wrapped it and to the owner's aad.
func wrapAAD(keyID string, aad []byte) []byte {
	return append([]byte("dshd secretbox dek v1\x00"+keyID+"\x00"), aad...)
}

func seal(a cipher.AEAD, plaintext, aad []byte) ([]byte, error) {
	nonce := make([]byte, a.NonceSize(), a.NonceSize()+len(plaintext)+a.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return a.Seal(nonce, nonce, plaintext, aad), nil
}

func open(a cipher.AEAD, sealed, aad []byte) ([]byte, error) {
	if len(sealed) < a.NonceSize()+a.Overhead() {
		return nil, ErrOpen
	}
	n := a.NonceSize()
	return a.Open(nil, sealed[:n], sealed[n:], aad)
}
