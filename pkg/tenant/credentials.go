package tenant

import (
	"regexp"
	"strings"
	"time"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/google/uuid"
)

// Credential providers: the model providers a tenant's credential is for (the preset providers
// that call a model over the network).
const (
	ProviderDeepSeek = "deepseek"
	ProviderOpenAI   = "openai"
)

// MaxCredentialKeyBytes bounds a credential's secret.
const MaxCredentialKeyBytes = 4096

// Credential is a tenant's stored model provider key, without the key: what every response and
// listing shows of it.
type Credential struct {
	ID        uuid.UUID `json:"id"`
	Name      string    `json:"name"`
	Provider  string    `json:"provider"`
	CreatedAt time.Time `json:"createdAt"`
}

// CredentialSpec is a credential to store: a name unique in the tenant, the provider and the
// secret key.
type CredentialSpec struct {
	Name     string
	Provider string
	APIKey   string
}

// CredentialSecret is a credential with its decrypted key, for the model client of a turn only.
// Its String and GoString never show the key.
type CredentialSecret struct {
	Credential
	APIKey string
}

// String names the credential, never its key.
func (c CredentialSecret) String() string { return "credential " + c.Name + " (" + c.ID.String() + ")" }

// GoString is String.
func (c CredentialSecret) GoString() string { return c.String() }

// Credential errors; their codes are the problem codes of the API.
var (
	// ErrCredentialNotFound reports a credential that does not exist in the tenant (or was
	// deleted).
	ErrCredentialNotFound = &fault.Error{Code: fault.NotFound, Message: "credential not found"}
	// ErrCredentialsDisabled reports that the server has no key encryption key
	// (DSHD_CREDENTIAL_KEYS): credentials cannot be stored or used.
	ErrCredentialsDisabled = &fault.Error{Code: CodeCredentialsDisabled,
		Message: "credentials are disabled on this server: the operator has not configured DSHD_CREDENTIAL_KEYS"}
	// ErrCredentialExists reports a name already used by another credential of the tenant.
	ErrCredentialExists = &fault.Error{Code: fault.Conflict, Message: "a credential with this name exists"}
)

// Problem codes of credentials (the API's error table maps them).
const (
	// CodeCredentialsDisabled: the server has no key encryption key configured.
	CodeCredentialsDisabled = "credentials_disabled"
	// CodeUnknownCredential: a preset names a credential the tenant does not have.
	CodeUnknownCredential = "unknown_credential"
)

var credentialName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// Normalize trims s and checks it: a name of 1 to MaxKeyNameBytes letters, digits, '.', '_'
// and '-' that is not a UUID (a preset names a credential by name or id), a known provider, and
// a key of 1 to MaxCredentialKeyBytes bytes without spaces or control characters. Messages never
// repeat the key.
func (s *CredentialSpec) Normalize() error {
	s.Name = strings.TrimSpace(s.Name)
	switch {
	case s.Name == "" || len(s.Name) > MaxKeyNameBytes || !credentialName.MatchString(s.Name):
		return fault.New(fault.Invalid, "name must be 1 to %d letters, digits, '.', '_' or '-', starting with a letter or digit", MaxKeyNameBytes)
	case isUUID(s.Name):
		return fault.New(fault.Invalid, "name must not be a UUID (presets name a credential by name or by id)")
	}
	switch s.Provider {
	case ProviderDeepSeek, ProviderOpenAI:
	default:
		return fault.New(fault.Invalid, `provider must be "deepseek" or "openai" (got %q)`, clipName(s.Provider))
	}
	s.APIKey = strings.TrimSpace(s.APIKey)
	if s.APIKey == "" || len(s.APIKey) > MaxCredentialKeyBytes {
		return fault.New(fault.Invalid, "apiKey must be 1 to %d bytes", MaxCredentialKeyBytes)
	}
	for _, r := range s.APIKey {
		if r <= ' ' || r == 0x7f {
			return fault.New(fault.Invalid, "apiKey must not contain spaces or control characters")
		}
	}
	return nil
}

func isUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil
}

// CredentialAAD is the associated data that binds a credential's sealed key to its tenant and
// id: a row copied to another tenant or credential does not decrypt.
func CredentialAAD(tenantID, credentialID uuid.UUID) []byte {
	return []byte("dshd credential v1\x00" + tenantID.String() + "\x00" + credentialID.String())
}
