package api

import (
	"errors"
	"net/http"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
)

// The frontend protocols (the AI SDK's UI message stream, AG-UI) name a conversation with an id
// of the client's choosing: the AI SDK's chat id, AG-UI's threadId. threadSession maps it to a
// session of the tenant without a table: an id that is one of the tenant's live sessions names
// it; any other id names the session whose id is derived from the tenant, the endpoint's preset,
// the protocol and the id, created from the preset the first time it is used. Creation is
// therefore idempotent on the id, across replicas and retries, and two tenants (or two presets,
// or two protocols) using the same thread id get different sessions.

// MaxThreadIDBytes bounds a frontend protocol's thread id.
const MaxThreadIDBytes = 200

// threadNamespace is the UUID namespace of the session ids derived from thread ids.
var threadNamespace = uuid.MustParse("5b0d6f0e-58d3-4c63-9d6f-7a1c3e0e8f21")

// threadSessionID is the session id derived from a thread id.
func threadSessionID(tenant, preset uuid.UUID, protocol, thread string) uuid.UUID {
	return uuid.NewSHA1(threadNamespace, []byte(tenant.String()+"\x00"+preset.String()+"\x00"+protocol+"\x00"+thread))
}

// errThreadDeleted is a thread whose derived session was deleted: its id cannot name a new one.
var errThreadDeleted = errorf(CodeNotFound, "the session of this thread id was deleted; use another id")

// threadSession returns the session a frontend protocol's thread id names (created reports that
// this call created it). field is the request's JSON pointer of the id, for its errors.
// A new session counts against the tenant's sessions quota, as POST /v1/sessions does.
func (rs sessionResource) threadSession(r *http.Request, presetID uuid.UUID, protocol, field, thread string) (sess eventlog.Session, created bool, _ error) {
	switch {
	case thread == "":
		return sess, false, fieldError(field, "must be a non-empty string")
	case len(thread) > MaxThreadIDBytes || !utf8.ValidString(thread):
		return sess, false, fieldError(field, "must be valid UTF-8 of at most 200 bytes")
	}
	ctx, tenant := r.Context(), tenantID(r)
	if id, err := uuid.Parse(thread); err == nil {
		sess, err := rs.s.cfg.Log.SessionGet(ctx, tenant, id)
		if err == nil {
			return sess, false, nil
		}
		if !errors.Is(err, pgstore.ErrNotFound) {
			return sess, false, err
		}
	}
	id := threadSessionID(tenant, presetID, protocol, thread)
	sess, err := rs.s.cfg.Log.SessionGet(ctx, tenant, id)
	if err == nil || !errors.Is(err, pgstore.ErrNotFound) {
		return sess, false, err
	}
	if err := rs.s.cfg.Quotas.Check(ctx, tenant, pgstore.ForSession); err != nil {
		return sess, false, err
	}
	p, err := rs.s.cfg.Presets.PresetGet(ctx, tenant, presetID)
	if err != nil {
		return sess, false, err
	}
	sess, err = rs.s.cfg.Log.SessionCreate(ctx, tenant, pgstore.SessionParams{
		ID: id, PresetID: &p.ID, PresetVersion: p.Version, AgentPreset: p.Name})
	switch {
	case err == nil:
		return sess, true, nil
	case !errors.Is(err, pgstore.ErrConflict):
		return sess, false, err
	}
	// Another request created it meanwhile, or it was created and deleted.
	sess, err = rs.s.cfg.Log.SessionGet(ctx, tenant, id)
	if errors.Is(err, pgstore.ErrNotFound) {
		return sess, false, errThreadDeleted
	}
	return sess, false, err
}
