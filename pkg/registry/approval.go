package registry

import (
	"context"
	"errors"
	"fmt"

	"github.com/dshd/dshd/pkg/fault"
)

// Approval outcomes (APR-1).
const (
	OutcomeAllowedOnce = "allowed-once"
	OutcomeRejected    = "rejected"
	OutcomeCancelled   = "cancelled"
	OutcomeUnavailable = "unavailable"
)

// ApprovalRequest is what an approver is asked (APR-3). Exec is the call waiting for the answer:
// its arguments (dshd shows them to the person deciding, E1) and its session log (Commit).
type ApprovalRequest struct {
	Agent    string
	ToolName string
	CallID   string
	Reason   string
	Exec     *Execution
	// Park lets the approver park the call: commit the ask and return ErrParked instead of
	// waiting. Never set for nested (run_code) calls.
	Park bool
}

// Approver resolves an `ask`. It returns one of the four outcomes; it should return
// OutcomeCancelled promptly when ctx is cancelled. An error (or any other outcome) fails the
// call with a final result (PIPE-6), except ErrNoApprovalService.
type Approver interface {
	Approve(ctx context.Context, req ApprovalRequest) (outcome string, err error)
}

// ErrNoApprovalService, returned (possibly wrapped) by an Approver, resolves the ask as if no
// approval service were mounted (APR-1): denied with its reason, or `tool "<n>" requires
// approval (not yet supported)`, with {ToolDeniedError, TOOL_DENIED}. It lets an approver serve
// some calls only and pass the others on (pkg/agents resolves the asks of agents under policy
// `never` and passes the rest on until the approval service is built).
var ErrNoApprovalService = errors.New("registry: no approval service for this call")

// ApproverFunc adapts a function to Approver.
type ApproverFunc func(ctx context.Context, req ApprovalRequest) (string, error)

// Approve implements Approver.
func (f ApproverFunc) Approve(ctx context.Context, req ApprovalRequest) (string, error) {
	return f(ctx, req)
}

// denied is a denial result (PIPE-5 with E1 codes).
func denied(reason, name, code string) *Result {
	return coded(name, code, reason)
}

// ask resolves an ask decision (APR-1). It returns allow=true to continue to the guards, or the
// prepared result and its kind.
func (r *Registry) ask(ctx context.Context, e *Execution, reason string) (allow bool, res *Result, kind PrepKind) {
	box := r.approver.Load()
	if box == nil {
		return false, noApprovalService(e.Name, reason), PrepPostResult
	}
	if e.Agent == "" {
		return false, denied(fmt.Sprintf("tool %q requires approval, but the call has no agent to route it through", e.Name),
			NameToolDenied, fault.CodeToolDenied), PrepPostResult
	}
	outcome, err := callApprover(ctx, box.a, ApprovalRequest{Agent: e.Agent, ToolName: e.Name, CallID: e.CallID, Reason: reason, Exec: e, Park: e.park})
	if errors.Is(err, ErrParked) && e.park {
		return false, nil, PrepPark
	}
	if errors.Is(err, ErrNoApprovalService) {
		return false, noApprovalService(e.Name, reason), PrepPostResult
	}
	if err != nil {
		return false, failureOf(err), PrepFinalResult
	}
	switch outcome {
	case OutcomeAllowedOnce:
		return true, nil, PrepDispatch
	case OutcomeRejected:
		return false, denied(fmt.Sprintf("the user rejected tool %q", e.Name), NameApprovalRejected, fault.CodeApprovalRejected), PrepPostResult
	case OutcomeCancelled:
		if ctx.Err() != nil {
			return false, AbortedBeforeDispatchResult(), PrepPostResult
		}
		return false, denied(fmt.Sprintf("approval for tool %q was cancelled", e.Name), NameApprovalCancelled, fault.CodeApprovalCancelled), PrepPostResult
	case OutcomeUnavailable:
		return false, denied(fmt.Sprintf("tool %q requires approval, but no approval channel is available", e.Name), NameToolDenied, fault.CodeToolDenied), PrepPostResult
	}
	return false, failure(fmt.Sprintf("approval for tool %q returned an unknown outcome %q", e.Name, outcome), nil), PrepFinalResult
}

// noApprovalService is the denial of an ask no approval service resolves (APR-1).
func noApprovalService(name, reason string) *Result {
	if reason == "" {
		reason = fmt.Sprintf("tool %q requires approval (not yet supported)", name)
	}
	return denied(reason, NameToolDenied, fault.CodeToolDenied)
}

func callApprover(ctx context.Context, a Approver, req ApprovalRequest) (outcome string, err error) {
	defer func() { err = recoverErr(recover(), err) }()
	return a.Approve(ctx, req)
}
