package tenant

import (
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/google/uuid"
)

// API key scopes. ScopeRead allows reading (GET and HEAD requests, and minting stream tokens);
// ScopeWrite allows the other requests, except those managing API keys, which need ScopeKeys.
// Every key has ScopeRead. A key without ScopeWrite is read-only; a tenant's first key has all
// three, and a new key gets read and write unless it asks for keys (and never more than the key
// that creates it).
const (
	ScopeRead  = "read"
	ScopeWrite = "write"
	ScopeKeys  = "keys"
)

// AllScopes are the scopes of a tenant's first key.
var AllScopes = []string{ScopeKeys, ScopeRead, ScopeWrite}

// DefaultKeyName names a key created without a name, as a tenant's first key is.
const DefaultKeyName = "default"

// MaxKeyNameBytes bounds the name of an API key or a credential.
const MaxKeyNameBytes = 100

// Key is an API key's record, without its secret (which is never stored).
type Key struct {
	ID         uuid.UUID  `json:"id"`
	TenantID   uuid.UUID  `json:"-"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix"` // the first characters of the secret, to recognise it
	Scopes     []string   `json:"scopes"`
	CreatedAt  time.Time  `json:"createdAt"`
	LastUsedAt *time.Time `json:"lastUsedAt"`
	ExpiresAt  *time.Time `json:"expiresAt"`
	RotatedAt  *time.Time `json:"rotatedAt"`
	RevokedAt  *time.Time `json:"revokedAt"`
	// ParentID is the key whose request created this one; nil for a tenant's first key and for
	// keys created before parents were recorded. Revoking a key revokes its descendants.
	ParentID *uuid.UUID `json:"parentId"`
}

// CanWrite reports whether the key allows requests that change something.
func (k Key) CanWrite() bool { return slices.Contains(k.Scopes, ScopeWrite) }

// Has reports whether the key has scope (every key has ScopeRead).
func (k Key) Has(scope string) bool { return scope == ScopeRead || slices.Contains(k.Scopes, scope) }

// Covers reports whether k may hand out or take over a key of other's scopes and expiry: k has
// every scope other has, and other expires no later than k (k without an expiry covers any).
func (k Key) Covers(scopes []string, expiresAt *time.Time) bool {
	for _, sc := range scopes {
		if !k.Has(sc) {
			return false
		}
	}
	return k.ExpiresAt == nil || (expiresAt != nil && !expiresAt.After(*k.ExpiresAt))
}

// KeySpec is what a client sets of a new API key: a name (default DefaultKeyName), its scopes
// (default read and write, not keys) and an optional expiry.
type KeySpec struct {
	Name      string
	Scopes    []string
	ExpiresAt *time.Time
	// Parent is the key creating this one (uuid.Nil: none). The store creates the key only while
	// the parent still authenticates (not revoked, not expired).
	Parent uuid.UUID
	// ParentHash is the hash (KeyHash) of the secret the parent authenticated with. When set, the
	// store creates the key only while the parent still has that secret: a rotation of the parent
	// committed between the request's authentication and the insert refuses the create
	// (ErrKeyParentInactive), as a revocation does. The API always sets it with Parent.
	ParentHash []byte
}

// Key errors.
var (
	// ErrKeyExpired reports an API key past its expiry.
	ErrKeyExpired = &fault.Error{Code: fault.NotFound, Message: "API key expired"}
	// ErrKeyParentInactive reports a key create whose parent (KeySpec.Parent) was revoked,
	// rotated (KeySpec.ParentHash) or expired before the key could be stored: nothing was created.
	ErrKeyParentInactive = &fault.Error{Code: fault.NotFound, Message: "the API key creating the key was revoked, rotated or has expired"}
	// ErrInvalidKeySpec reports a key name or scope that breaks the rules.
	ErrInvalidKeySpec = &fault.Error{Code: fault.Invalid, Message: "invalid API key"}
)

// Normalize fills the defaults of s and checks it: the name is 1 to MaxKeyNameBytes bytes after
// trimming, scopes are known (write implies read; the result is sorted), and an expiry lies after
// now.
func (s *KeySpec) Normalize(now time.Time) error {
	s.Name = strings.TrimSpace(s.Name)
	if s.Name == "" {
		s.Name = DefaultKeyName
	}
	if len(s.Name) > MaxKeyNameBytes {
		return fault.New(fault.Invalid, "name must be at most %d bytes", MaxKeyNameBytes)
	}
	scopes, err := NormalizeScopes(s.Scopes)
	if err != nil {
		return err
	}
	s.Scopes = scopes
	if s.ExpiresAt != nil && !s.ExpiresAt.After(now) {
		return fault.New(fault.Invalid, "expiresAt must lie in the future")
	}
	return nil
}

// NormalizeScopes returns scopes checked, with read added, sorted and without duplicates; none
// means read and write.
func NormalizeScopes(scopes []string) ([]string, error) {
	if len(scopes) == 0 {
		return []string{ScopeRead, ScopeWrite}, nil
	}
	out := []string{ScopeRead}
	for _, sc := range scopes {
		switch sc {
		case ScopeRead, ScopeWrite, ScopeKeys:
			out = append(out, sc)
		default:
			return nil, fault.New(fault.Invalid, `unknown scope %q (want "read", "write" or "keys")`, clipName(sc))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// clipName returns s for a message: at most 40 bytes, cut at a rune boundary.
func clipName(s string) string {
	if len(s) <= 40 {
		return s
	}
	cut := 40
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
