package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/approval"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
)

type approvalItem struct {
	ID        string          `json:"id"`
	ToolName  string          `json:"toolName"`
	CallID    string          `json:"callId,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Reason    string          `json:"reason,omitempty"`
}

type approvalList struct {
	Items []approvalItem `json:"items"`
}

type approvalAnswer struct {
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
}

type approvalDecided struct {
	ID      string `json:"id"`
	Outcome string `json:"outcome"`
	Seq     int64  `json:"seq"`
}

// approvalEvents returns the session's approval events (asked and decided), in seq order.
func (rs sessionResource) approvalEvents(ctx context.Context, tenant, id uuid.UUID) ([]eventlog.Event, error) {
	var out []eventlog.Event
	after := int64(-1)
	for {
		page, err := rs.s.cfg.Log.EventList(ctx, tenant, id, pgstore.ListQuery{After: after,
			Limit: pgstore.MaxEventPage, Types: []string{eventlog.TypeApprovalAsked, eventlog.TypeApprovalDecided}})
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < pgstore.MaxEventPage {
			return out, nil
		}
		after = page[len(page)-1].Seq
	}
}

// handleApprovalList answers the session's pending approvals: asked, with the call's arguments,
// and not decided yet (APR, E1).
func (rs sessionResource) handleApprovalList(w http.ResponseWriter, r *http.Request) {
	id, err := rs.sessionID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	evs, err := rs.approvalEvents(r.Context(), tenantID(r), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := []approvalItem{}
	for _, a := range approval.Pending(evs) {
		items = append(items, approvalItem{ID: a.ID, ToolName: a.ToolName, CallID: a.CallID, Arguments: a.Arguments, Reason: a.Reason})
	}
	writeJSON(w, http.StatusOK, approvalList{Items: items})
}

// handleApprovalAnswer records a person's decision on a pending approval, exactly once: a second
// answer, or one after the approval timed out or its turn ended, answers 409.
func (rs sessionResource) handleApprovalAnswer(w http.ResponseWriter, r *http.Request) {
	id, err := rs.sessionID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var req approvalAnswer
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	tenant := tenantID(r)
	approvalID := chi.URLParam(r, "approvalId")
	read := func(ctx context.Context) ([]eventlog.Event, int64, error) {
		h, err := rs.s.cfg.Log.SessionHead(ctx, tenant, id)
		if err != nil {
			return nil, 0, err
		}
		evs, err := rs.approvalEvents(ctx, tenant, id)
		return evs, h.Last(), err
	}
	j := rs.s.cfg.Log.Journal(nil, tenant, id, uuid.Nil)
	ev, err := approval.Answer(r.Context(), j, read, approvalID, req.Outcome, req.Reason)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, approvalDecided{ID: approvalID, Outcome: req.Outcome, Seq: ev.Seq})
}

type approvalPolicyRequest struct {
	Policy string `json:"policy"`
}

type approvalPolicySet struct {
	Policy string `json:"policy"`
	Seq    int64  `json:"seq"`
}

// approvalPolicies sets a session's approval policy through the post path (worker.Service).
type approvalPolicies interface {
	ApprovalPolicySet(ctx context.Context, tenantID, sessionID uuid.UUID, policy string) (int64, error)
}

// handleApprovalPolicySet sets the session's approval policy (APR-6): it appends
// `approval/policy` and injects a notice of the change that the model reads at its next step;
// the policy decides the session's asks from then on (`never`: rejected, nobody asked). 200
// {policy, seq} with the seq of the `approval/policy` event; 400 for a policy other than ask or
// never. It is posted as an inject is: the session's and the tenant's post rates (429
// rate_limited) and the inbox bound (429 inbox_full) apply, and a notice that supersedes one no
// step has read yet replaces it. Setting the policy the session's last `approval/policy` set
// already appends nothing and answers that event's seq.
func (rs sessionResource) handleApprovalPolicySet(w http.ResponseWriter, r *http.Request) {
	id, err := rs.sessionID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var req approvalPolicyRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if !approval.ValidPolicy(req.Policy) {
		writeProblem(w, CodeInvalidRequest, `policy must be "ask" or "never"`)
		return
	}
	ap, ok := rs.s.cfg.Turns.(approvalPolicies)
	if !ok {
		writeError(w, r, errors.New("api: the turns service cannot set approval policies"))
		return
	}
	seq, err := ap.ApprovalPolicySet(r.Context(), tenantID(r), id, req.Policy)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, approvalPolicySet{Policy: req.Policy, Seq: seq})
}
