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
	"github.com/dshd/dshd/pkg/scheduler"
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

// approvalCallWindow bounds how far back from an ask approvalArguments looks for its call: a
// call asks in its prepare, right after its tool/call (SCHED-3) or, for a run_code sub-call, its
// tool/code-dispatch-start, and before the next call's.
const approvalCallWindow = 64

// approvalArguments returns the arguments of the call an approval asks about, read from the
// call's tool/call (or a sub-call's tool/code-dispatch-start) among the few before the ask; else
// those an older log's ask carried (dshd wrote them into approval/asked before issue 18); else
// none.
func (rs sessionResource) approvalArguments(ctx context.Context, tenant, id uuid.UUID, asked eventlog.Event, a eventlog.ApprovalAsked) (json.RawMessage, error) {
	if a.CallID == "" {
		return a.Arguments, nil
	}
	args, err := rs.callArguments(ctx, tenant, id, asked.Seq, approvalCallWindow)
	if err != nil {
		return nil, err
	}
	if got, ok := args[a.CallID]; ok {
		return got, nil
	}
	return a.Arguments, nil
}

// callArguments returns, by call id, the arguments of the calls (tool/call) and run_code
// sub-calls (tool/code-dispatch-start) among the last window of them before seq, as each call's
// pipeline got them (SCHED-1). The later of two events of one call id wins.
func (rs sessionResource) callArguments(ctx context.Context, tenant, id uuid.UUID, before int64, window int) (map[string]json.RawMessage, error) {
	evs, err := rs.s.cfg.Log.EventsBefore(ctx, tenant, id, before,
		[]string{eventlog.TypeToolCall, eventlog.TypeToolCodeDispatchInit}, window)
	if err != nil {
		return nil, err
	}
	out := map[string]json.RawMessage{}
	for _, ev := range evs { // newest first
		switch ev.Type {
		case eventlog.TypeToolCall:
			if c, err := eventlog.Decode[eventlog.ToolCall](ev); err == nil && !seen(out, c.CallID) {
				out[c.CallID] = scheduler.ParseArguments(c.Arguments)
			}
		case eventlog.TypeToolCodeDispatchInit:
			if c, err := eventlog.Decode[eventlog.CodeDispatchStart](ev); err == nil && !seen(out, c.SubCallID) {
				out[c.SubCallID] = c.Arguments
			}
		}
	}
	return out, nil
}

func seen(m map[string]json.RawMessage, k string) bool { _, ok := m[k]; return ok }

// handleApprovalList answers the session's pending approvals: asked and not decided yet (APR,
// E1), each with its call's arguments. It reads the pending asks only (pgstore
// ApprovalsPending), never the session's whole approval history.
func (rs sessionResource) handleApprovalList(w http.ResponseWriter, r *http.Request) {
	id, err := rs.sessionID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	tenant := tenantID(r)
	evs, err := rs.s.cfg.Log.ApprovalsPending(r.Context(), tenant, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := []approvalItem{}
	for _, ev := range evs {
		a, err := eventlog.Decode[eventlog.ApprovalAsked](ev)
		if err != nil {
			continue
		}
		args, err := rs.approvalArguments(r.Context(), tenant, id, ev, a)
		if err != nil {
			writeError(w, r, err)
			return
		}
		items = append(items, approvalItem{ID: a.ID, ToolName: a.ToolName, CallID: a.CallID, Arguments: args, Reason: a.Reason})
	}
	writeJSON(w, http.StatusOK, approvalList{Items: items})
}

// approvalAnswers records approval decisions through the post path (worker.Service): it appends
// the approval/decided and wakes the session's turn when it is parked on the approval (E6). Its
// errors are those of approval.Answer.
type approvalAnswers interface {
	AnswerApproval(ctx context.Context, tenantID, sessionID uuid.UUID, approvalID, outcome, reason string) (eventlog.Event, error)
}

// handleApprovalAnswer records a person's decision on a pending approval, exactly once: a second
// answer, or one after the approval timed out or its turn ended, answers 409. It reads the one
// approval it names (pgstore ApprovalEvents). When the turns service answers approvals itself
// (approvalAnswers), it does, so that a turn parked on the approval resumes.
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
	if aa, ok := rs.s.cfg.Turns.(approvalAnswers); ok {
		ev, err := aa.AnswerApproval(r.Context(), tenant, id, approvalID, req.Outcome, req.Reason)
		if err != nil {
			writeError(w, r, pointTo(err, "outcome", "reason"))
			return
		}
		writeJSON(w, http.StatusOK, approvalDecided{ID: approvalID, Outcome: req.Outcome, Seq: ev.Seq})
		return
	}
	read := func(ctx context.Context) ([]eventlog.Event, int64, error) {
		h, err := rs.s.cfg.Log.SessionHead(ctx, tenant, id)
		if err != nil {
			return nil, 0, err
		}
		evs, err := rs.s.cfg.Log.ApprovalEvents(ctx, tenant, id, approvalID)
		return evs, h.Last(), err
	}
	j := rs.s.cfg.Log.Journal(nil, tenant, id, uuid.Nil)
	ev, err := approval.Answer(r.Context(), j, read, approvalID, req.Outcome, req.Reason)
	if err != nil {
		writeError(w, r, pointTo(err, "outcome", "reason"))
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
		writeError(w, r, fieldError("/policy", `policy must be "ask" or "never"`))
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
