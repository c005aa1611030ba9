// Package tenant is the vocabulary of tenants and their API keys; pkg/pgstore stores them.
//
// An API key is a random secret shown once, when it is created; only its SHA-256 hash and a short
// prefix (to recognise it in listings) are stored. Authenticating a request hashes the presented
// secret and looks the hash up.
package tenant

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"time"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/google/uuid"
)

// ErrNotFound reports an unknown tenant, or an API key that is unknown or revoked.
var ErrNotFound = &fault.Error{Code: fault.NotFound, Message: "tenant not found"}

// ErrInvalidName reports an empty or overlong tenant name.
var ErrInvalidName = &fault.Error{Code: fault.Invalid, Message: "tenant name must be 1 to 200 characters"}

// KeyPrefix starts every API key, so that a leaked key is recognisable by secret scanners.
const KeyPrefix = "dshd_"

// Tenant is one customer: every other row in the database belongs to exactly one tenant.
type Tenant struct {
	ID        uuid.UUID `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
}

// NewKey returns a fresh API key secret (KeyPrefix followed by 32 random bytes in unpadded
// base64url), its SHA-256 hash and its display prefix.
func NewKey() (secret string, hash []byte, prefix string, err error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", nil, "", err
	}
	secret = KeyPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	return secret, KeyHash(secret), secret[:len(KeyPrefix)+6], nil
}

// KeyHash returns the stored hash of a key secret.
func KeyHash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}
