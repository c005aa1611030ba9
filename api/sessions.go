package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/sandbox"
	"github.com/dshd/dshd/pkg/worker"
)

// sessionResource serves /v1/sessions: sessions of the authenticated tenant, their history and
// their event log (events.go, stream.go).
type sessionResource struct {
	s *Server
}

func (rs sessionResource) routes() chi.Router {
	r := chi.NewRouter()
	r.Post("/", rs.handleSessionCreate)
	r.Get("/", rs.handleSessionList)
	r.Post("/import", rs.handleSessionImport) // import.go, export.go: docs/import-export.md
	r.Get("/{id}/export", rs.handleSessionExport)
	r.Get("/{id}", rs.handleSessionGet)
	r.Delete("/{id}", rs.handleSessionDelete)
	r.Get("/{id}/history", rs.handleSessionHistory)
	r.Get("/{id}/events", rs.handleEventList)
	r.Get("/{id}/events/stream", asEventStream(rs.handleEventList)) // streamops.go
	r.Post("/{id}/messages", rs.handleMessageCreate)
	r.Post("/{id}/messages/stream", asEventStream(rs.handleMessageCreate))
	r.Post("/{id}/cancel", rs.handleSessionCancel)
	r.Get("/{id}/prompt", rs.handleSessionPrompt)
	r.Get("/{id}/approvals", rs.handleApprovalList)
	r.Post("/{id}/approvals/{approvalId}", rs.handleApprovalAnswer)
	r.Get("/{id}/tool-results", rs.handleToolResultList)
	r.Post("/{id}/tool-results", rs.handleToolResultPost)
	r.Post("/{id}/stream-tokens", rs.handleStreamTokenCreate)
	r.Post("/{id}/action-tokens", rs.handleActionTokenCreate) // actiontokens.go
	r.Get("/{id}/turns", rs.handleTurnList)
	r.Get("/{id}/turns/{n}", rs.handleTurnGet)
	r.Put("/{id}/approval-policy", rs.handleApprovalPolicySet)
	return r
}

// sessionJSON is a session as the API shows it.
type sessionJSON struct {
	ID            uuid.UUID  `json:"id"`
	PresetID      *uuid.UUID `json:"presetId"`
	PresetVersion *int       `json:"presetVersion"`
	CreatedAt     time.Time  `json:"createdAt"`
	ParentSession string     `json:"parentSession,omitempty"`
	SeedLength    *int64     `json:"seedLength,omitempty"`
	LastSeq       int64      `json:"lastSeq"` // -1 for an empty log, at the time of the read
	// Status, the running turn, the last turn's number and (GET of one session) the usage totals
	// of its turns: turns_resource.go.
	Status   string     `json:"status,omitempty"`
	Turn     *int       `json:"turn,omitempty"`
	LastTurn *int       `json:"lastTurn,omitempty"`
	Usage    *usageJSON `json:"usage,omitempty"`
}

func sessionOut(s eventlog.Session) sessionJSON {
	out := sessionJSON{ID: s.ID, PresetID: s.PresetID, CreatedAt: s.CreatedAt,
		ParentSession: s.Header.ParentSession, SeedLength: s.Header.SeedLength, LastSeq: s.LastSeq}
	if s.PresetID != nil {
		v := s.PresetVersion
		out.PresetVersion = &v
	}
	return out
}

// sessionCreateRequest creates a session of a preset, or (with fork) a child of an existing
// session that inherits its preset version (SES-15).
type sessionCreateRequest struct {
	PresetID *uuid.UUID   `json:"presetId"`
	Fork     *forkRequest `json:"fork"`
}

type forkRequest struct {
	SessionID   uuid.UUID `json:"sessionId"`
	BoundarySeq *int64    `json:"boundarySeq"` // default: the source's last event
}

// handleSessionCreate creates a session pinned to the preset's current version, or forks one:
// 201 session. An Idempotency-Key makes it safe to retry (idempotency.go).
func (rs sessionResource) handleSessionCreate(w http.ResponseWriter, r *http.Request) {
	idempotentCreate(w, r, rs.s.cfg.Log.Creates(), tenantID(r).String(), idemRouteSession, nil, rs.createSession)
}

func (rs sessionResource) createSession(w http.ResponseWriter, r *http.Request) {
	var req sessionCreateRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if !rs.s.checkQuota(w, r, pgstore.ForSession) {
		return
	}
	var (
		sess eventlog.Session
		err  error
	)
	switch {
	case req.Fork != nil && req.PresetID != nil:
		err = fieldError("/fork", "give presetId or fork, not both: a fork keeps the preset of its source")
	case req.Fork != nil:
		sess, err = rs.fork(r, *req.Fork)
	case req.PresetID != nil:
		sess, err = rs.create(r, *req.PresetID)
	default:
		err = fieldError("/presetId", "presetId is required (or fork: {sessionId, boundarySeq})")
	}
	if err != nil {
		writeError(w, r, pointTo(err, "INVALID_BOUNDARY=/fork/boundarySeq"))
		return
	}
	setSession(r, sess.ID)
	logger(r).Info("session created", "preset", req.PresetID, "fork", req.Fork != nil)
	writeJSON(w, http.StatusCreated, sessionOut(sess))
}

// fork forks the session and copies its workspace to the child. With workspaces, the source's
// run lease is held for the copy (session_busy while another owner's lease is recorded), so the
// copy is the workspace as of the fork; the copy is admitted against the tenant's disk bound
// first (workspace_quota_exceeded) and written, under the child's id, before the child exists:
// no turn of the child can start before its workspace is complete. The lease is confirmed after
// the copy (lost: a turn of the source may have changed the files mid-copy, so the copy is
// removed and the fork answers session_busy), and only then is the child created; a fork the
// log refuses removes the copy again.
func (rs sessionResource) fork(r *http.Request, f forkRequest) (eventlog.Session, error) {
	ctx := r.Context()
	bounds, err := rs.s.cfg.Quotas.ForkBounds(ctx, tenantID(r)) // checked again in the fork's transaction
	if err != nil {
		return eventlog.Session{}, err
	}
	ws := rs.s.cfg.Workspaces
	if ws == nil {
		return rs.s.cfg.Log.ForkWithin(ctx, tenantID(r), f.SessionID, f.BoundarySeq, nil, bounds)
	}
	held, err := rs.s.cfg.Turns.Hold(ctx, tenantID(r), f.SessionID)
	if errors.Is(err, worker.ErrSessionBusy) {
		return eventlog.Session{}, errFork(errForkBusy)
	}
	if errors.Is(err, eventlog.ErrNotFound) {
		// Unknown, another tenant's or deleted: the log's fork says which (404, or 409
		// session_not_live for a deleted source), as without workspaces. A source that is
		// unknown here cannot be forked there; should the log fork it anyway, the child is
		// removed, as it has no workspace.
		sess, ferr := rs.s.cfg.Log.ForkWithin(ctx, tenantID(r), f.SessionID, f.BoundarySeq, nil, bounds)
		if ferr != nil {
			return sess, ferr
		}
		rs.dropChild(r, sess.ID)
		return eventlog.Session{}, err
	}
	if err != nil {
		return eventlog.Session{}, err
	}
	defer held.Release()
	done, err := ws.AdmitCopy(f.SessionID.String())
	if errors.Is(err, sandbox.ErrTenantQuota) {
		return eventlog.Session{}, errorf(CodeWorkspaceQuotaExceeded, "the fork's copy of the workspace is refused: "+err.Error())
	}
	if err != nil {
		return eventlog.Session{}, fmt.Errorf("api: fork: admit the workspace copy: %w", err)
	}
	defer done()
	child := uuid.New()
	if err := ws.Copy(f.SessionID.String(), child.String()); err != nil {
		rs.dropCopy(r, child)
		return eventlog.Session{}, fmt.Errorf("api: fork: copy the workspace: %w", err)
	}
	if err := held.Confirm(ctx); err != nil {
		rs.dropCopy(r, child)
		if errors.Is(err, eventlog.ErrLeaseLost) {
			return eventlog.Session{}, errFork(errForkLeaseLost)
		}
		return eventlog.Session{}, fmt.Errorf("api: fork: confirm the source's run lease: %w", err)
	}
	sess, err := rs.s.cfg.Log.ForkWithin(ctx, tenantID(r), f.SessionID, f.BoundarySeq, &child, bounds)
	if err != nil {
		rs.dropCopy(r, child)
		return sess, err
	}
	return sess, nil
}

// The fork's session_busy messages.
const (
	errForkBusy = "the source session's run lease is held: a turn of it is running (or is being recovered " +
		"after a crash), or another fork of it is copying its workspace; fork again once that is over " +
		"(the fork copies the workspace as it is then)"
	errForkLeaseLost = "the fork lost the source session's run lease while it copied the workspace " +
		"(a turn may have changed it meanwhile): nothing was created; fork again"
)

func errFork(msg string) error { return errorf(CodeSessionBusy, msg) }

// dropCopy removes the workspace a fork copied for a child it did not create.
func (rs sessionResource) dropCopy(r *http.Request, child uuid.UUID) {
	if err := rs.s.cfg.Workspaces.Delete(child.String()); err != nil {
		logger(r).Error("fork: the workspace copy of a child not created could not be removed", "child", child, "error", err)
	}
}

// dropChild deletes a child session the fork must not leave.
func (rs sessionResource) dropChild(r *http.Request, child uuid.UUID) {
	if err := rs.s.cfg.Log.SessionDelete(context.WithoutCancel(r.Context()), tenantID(r), child); err != nil {
		logger(r).Error("fork: a child without its workspace could not be deleted", "child", child, "error", err)
	}
}

func (rs sessionResource) create(r *http.Request, presetID uuid.UUID) (eventlog.Session, error) {
	p, err := rs.s.cfg.Presets.PresetGet(r.Context(), tenantID(r), presetID)
	if err != nil {
		return eventlog.Session{}, err
	}
	return rs.s.cfg.Log.SessionCreate(r.Context(), tenantID(r), pgstore.SessionParams{
		PresetID: &p.ID, PresetVersion: p.Version, AgentPreset: p.Name})
}

// handleSessionList answers {items, nextCursor}, newest first.
func (rs sessionResource) handleSessionList(w http.ResponseWriter, r *http.Request) {
	limit, err := pageLimit(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	list, next, err := rs.s.cfg.Log.SessionList(r.Context(), tenantID(r), r.URL.Query().Get("cursor"), limit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := make([]sessionJSON, len(list))
	for i, s := range list {
		items[i] = sessionOut(s)
	}
	if err := rs.withStates(r.Context(), tenantID(r), items); err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page[sessionJSON]{Items: items, NextCursor: next})
}

func (rs sessionResource) handleSessionGet(w http.ResponseWriter, r *http.Request) {
	id, err := rs.sessionID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	sess, err := rs.s.cfg.Log.SessionGet(r.Context(), tenantID(r), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out, err := rs.sessionDetail(r.Context(), tenantID(r), sess)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// handleSessionDelete deletes the session: 204; afterwards it answers 404 everywhere.
func (rs sessionResource) handleSessionDelete(w http.ResponseWriter, r *http.Request) {
	id, err := rs.sessionID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := rs.s.cfg.Log.SessionDelete(r.Context(), tenantID(r), id); err != nil {
		writeError(w, r, err)
		return
	}
	if ws := rs.s.cfg.Workspaces; ws != nil {
		if err := ws.Delete(id.String()); err != nil {
			logger(r).Warn("session deleted, its workspace not", "error", err)
		}
	}
	// The streams of the session on this replica end now; other replicas' hear of it from the
	// store's notification.
	rs.s.tails.gone(id)
	w.WriteHeader(http.StatusNoContent)
}

// historyPage is a page of the model-visible history; nextCursor is left out after the last page,
// so the history of a small session is one page exactly as it always was.
type historyPage struct {
	Messages   []llm.Message `json:"messages"`
	NextCursor string        `json:"nextCursor,omitempty"`
}

// handleSessionHistory answers {messages, nextCursor}: a page of the model-visible history rebuilt
// from the log (SES-5), at most ?limit= messages (default 500, at most 1000) and Config.PageBytes
// of their data, after ?cursor= (the previous page's nextCursor).
func (rs sessionResource) handleSessionHistory(w http.ResponseWriter, r *http.Request) {
	id, err := rs.sessionID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	limit, err := intParam(r, "limit", pgstore.DefaultHistoryPage, 1, pgstore.MaxHistoryPage)
	if err != nil {
		writeError(w, r, err)
		return
	}
	msgs, next, err := rs.s.cfg.Log.HistoryPage(r.Context(), tenantID(r), id,
		pgstore.HistoryQuery{Cursor: r.URL.Query().Get("cursor"), Limit: int(limit), MaxBytes: rs.s.cfg.PageBytes})
	if err != nil {
		writeError(w, r, err)
		return
	}
	if msgs == nil {
		msgs = []llm.Message{}
	}
	writeJSON(w, http.StatusOK, historyPage{Messages: msgs, NextCursor: next})
}

// sessionID parses {id} and records it for the request log.
func (rs sessionResource) sessionID(r *http.Request) (uuid.UUID, error) {
	id, err := pathID(r, "session")
	if err == nil {
		setSession(r, id)
	}
	return id, err
}
