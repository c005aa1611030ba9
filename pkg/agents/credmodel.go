package agents

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/tenant"
)

// credentialModel is the model provider of a preset that names a tenant credential: every call
// reads and decrypts the credential (one row by the tenant and name or id, a microsecond of
// AES-GCM), so a deleted credential is never used again, and calls through the client of its
// base URL and key, which no other tenant's preset shares.
type credentialModel struct {
	ms       *models
	tenantID uuid.UUID
	ref      string
	provider string
	baseURL  string
}

// Stream resolves the credential and sends req with its key.
func (c *credentialModel) Stream(ctx context.Context, req llm.Request) (llm.Stream, error) {
	cred, err := c.resolve(ctx)
	if err != nil {
		return nil, err
	}
	return c.ms.client(c.baseURL, cred.ID.String(), cred.APIKey).Stream(ctx, req)
}

// resolve returns the credential, or the *llm.Error a turn ends with when it cannot be used:
// INVALID_CREDENTIAL (not retried) when it is gone, disabled, for another provider or does not
// decrypt; SERVER (retried) while the database is unavailable. When the credential the preset
// names is gone or changed (deleted, or deleted and created again: another id), the clients of
// the one it found before are dropped, and their decrypted key with them.
func (c *credentialModel) resolve(ctx context.Context) (tenant.CredentialSecret, error) {
	cred, err := c.find(ctx)
	var le *llm.Error
	switch {
	case err == nil:
		c.found(cred.ID.String())
	case errors.As(err, &le) && le.Code == llm.CodeInvalidCredential:
		c.found("")
	}
	return cred, err
}

// found records the id of the credential a resolve found ("" none) and drops the clients of the
// one found before when it differs.
func (c *credentialModel) found(id string) {
	c.ms.credentialFound(c.tenantID.String()+"\x00"+c.ref, id)
}

// find reads and decrypts the credential; see resolve.
func (c *credentialModel) find(ctx context.Context) (tenant.CredentialSecret, error) {
	if c.ms.cfg.Credentials == nil {
		return tenant.CredentialSecret{}, llm.NewError(llm.CodeInvalidCredential, "credentials are disabled on this server")
	}
	cred, err := c.ms.cfg.Credentials.CredentialResolve(ctx, c.tenantID, c.ref)
	switch {
	case err == nil && cred.Provider != c.provider:
		return tenant.CredentialSecret{}, llm.NewError(llm.CodeInvalidCredential,
			"the preset's credential %q is for provider %q, not %q", clip(c.ref), cred.Provider, c.provider)
	case err == nil:
		return cred, nil
	case ctx.Err() != nil:
		return tenant.CredentialSecret{}, ctx.Err()
	case errors.Is(err, tenant.ErrCredentialNotFound):
		return tenant.CredentialSecret{}, llm.NewError(llm.CodeInvalidCredential,
			"the preset's credential %q does not exist (deleted?)", clip(c.ref))
	case errors.Is(err, tenant.ErrCredentialsDisabled):
		return tenant.CredentialSecret{}, llm.NewError(llm.CodeInvalidCredential, "credentials are disabled on this server")
	case fault.Code(err) == fault.Unavailable:
		e := llm.NewError(llm.CodeServer, "the preset's credential could not be read: the database is unavailable")
		e.Err = err
		return tenant.CredentialSecret{}, e
	}
	if ok, suppressed := c.ms.credWarns.allow(c.tenantID.String()+"\x00"+c.ref, time.Now()); ok {
		c.ms.cfg.Logger.WarnContext(ctx, "a tenant credential cannot be used", "tenant", c.tenantID, "err", err,
			"suppressed", suppressed, "every", credentialWarnEvery)
	}
	e := llm.NewError(llm.CodeInvalidCredential, "the preset's credential %q cannot be decrypted on this server", clip(c.ref))
	e.Err = err
	return tenant.CredentialSecret{}, e
}

// credentialWarnEvery is how often at most the agents warn about one unusable credential (of a
// tenant and name): it fails every model call of its presets, and the log should say so, not
// repeat it at each call.
const credentialWarnEvery = time.Minute

// warnLimiter lets one warning a key through per credentialWarnEvery and counts the others.
type warnLimiter struct {
	mu   sync.Mutex
	last map[string]*warnState
}

type warnState struct {
	at         time.Time
	suppressed int
}

// allow reports whether a warning of key may be logged at now, and how many were suppressed
// since the last one. It keeps at most 1024 keys (forgetting all beyond: a warning more).
func (w *warnLimiter) allow(key string, now time.Time) (ok bool, suppressed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last == nil || len(w.last) >= 1024 {
		w.last = map[string]*warnState{}
	}
	st := w.last[key]
	if st != nil && now.Sub(st.at) < credentialWarnEvery {
		st.suppressed++
		return false, 0
	}
	if st == nil {
		st = &warnState{}
		w.last[key] = st
	}
	suppressed, st.at, st.suppressed = st.suppressed, now, 0
	return true, suppressed
}
