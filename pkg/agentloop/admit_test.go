package agentloop

import (
	"context"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
)

// TestAdmitRefusesATurnBeforeItsModelCall: a turn that Admit refuses (a tenant's token quota)
// ends at once with Admit's error, takes the message it was woken for out of the inbox without
// entering it, and calls no model; the turn before it, admitted, ran as usual.
func TestAdmitRefusesATurnBeforeItsModelCall(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	asked := 0
	h.cfg.Admit = func(context.Context) *eventlog.TurnError {
		if asked++; asked == 1 {
			return nil
		}
		return &eventlog.TurnError{Code: "TOKEN_QUOTA_EXCEEDED", Message: "spent"}
	}
	h.post(eventlog.InboxNextTurn, "text")
	h.post(eventlog.InboxNextTurn, "text")
	reasons := h.serve(context.Background())
	if len(reasons) != 2 || reasons[0].Kind != eventlog.EndCompleted || reasons[1].Kind != eventlog.EndError ||
		reasons[1].Error == nil || reasons[1].Error.Code != "TOKEN_QUOTA_EXCEEDED" || reasons[1].Error.Message != "spent" {
		t.Fatalf("reasons %+v", reasons)
	}
	if n, m := len(h.ofType(eventlog.TypeStepStart)), len(h.ofType(eventlog.TypeUserMessage)); n != 1 || m != 1 || asked != 2 {
		t.Fatalf("%d steps and %d entered messages after %d admissions: want the first turn's only", n, m, asked)
	}
	if hd := h.j.Head(); hd.Inbox.NextTurn != 0 || hd.Inbox.NextStep != 0 {
		t.Fatalf("the refused turn left its message in the inbox: %+v", hd.Inbox)
	}
	h.checkInvariants()
}
