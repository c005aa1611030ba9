package agentloop

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/approval"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/registry"
)

// approvalHarness is a harness whose echo calls ask, resolved by an approval.Service over the
// session log; a watcher delivers every committed decision as the worker's does.
func approvalHarness(t *testing.T, timeout time.Duration) (*harness, *approval.Service) {
	h := newHarness(t, nil)
	svc := approval.New(approval.Config{TimeoutFunc: func(string) time.Duration { return timeout }})
	h.reg.MountApprover(svc)
	if _, err := kernel.Listen(h.k.Fiber("policy", nil), h.reg.Hooks.PreExecute,
		func(ctx context.Context, e *registry.Execution, next func(context.Context) (registry.Decision, error)) (registry.Decision, error) {
			if e.Name == "echo" {
				return registry.Ask("echo needs a person"), nil
			}
			return next(ctx)
		}); err != nil {
		t.Fatal(err)
	}
	h.j.OnAppend = func(evs []eventlog.Event) {
		for _, ev := range evs {
			if d, err := eventlog.Decode[eventlog.ApprovalDecided](ev); err == nil {
				svc.Deliver(d)
			}
		}
	}
	return h, svc
}

// askedOnce waits for the turn's approval/asked and returns it.
func askedOnce(t *testing.T, h *harness) eventlog.ApprovalAsked {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if p := approval.Pending(h.j.Events()); len(p) == 1 {
			return p[0]
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no pending approval: %v", h.types())
	return eventlog.ApprovalAsked{}
}

func readAll(j *eventlog.MemJournal) approval.ReadFunc {
	return func(context.Context) ([]eventlog.Event, int64, error) {
		evs := j.Events()
		return evs, int64(len(evs)) - 1, nil
	}
}

// TestAPR3_AskedThenDecidedInTheTurn: the ask commits approval/asked in the reference's shape
// (naming the call, without its arguments) while the call waits; an answer from another writer commits approval/decided, exactly once (a
// second answer is a conflict); the body runs after it (scenario 8, allowed-once).
func TestAPR3_AskedThenDecidedInTheTurn(t *testing.T) {
	t.Parallel()
	for outcome, want := range map[string]string{
		eventlog.ApprovalAllowedOnce: "hi",
		eventlog.ApprovalRejected:    `Error: the user rejected tool "echo"`,
	} {
		h, _ := approvalHarness(t, time.Minute)
		h.post(eventlog.InboxNextTurn, `tool:echo args:{"text":"hi"}`)
		done := h.serveAsync(NewRunner(h.cfg, h.j))
		a := askedOnce(t, h)
		if a.ToolName != "echo" || a.Reason != "echo needs a person" || a.Arguments != nil || a.CallID == "" {
			t.Fatalf("asked %+v", a)
		}
		if _, err := approval.Answer(context.Background(), h.j, readAll(h.j), a.ID, outcome, "ok"); err != nil {
			t.Fatal(err)
		}
		if _, err := approval.Answer(context.Background(), h.j, readAll(h.j), a.ID, outcome, "again"); !errors.Is(err, approval.ErrAnswered) {
			t.Fatalf("second answer: %v", err)
		}
		if s := <-done; s.err != nil || s.reasons[0].Kind != eventlog.EndCompleted {
			t.Fatalf("served %+v %v", s.reasons, s.err)
		}
		rs := results(t, h)
		if got := rs[0].Message.Content[0].Content[0].Text; got != want {
			t.Errorf("%s: result %q, want %q", outcome, got, want)
		}
		if !subsequence(h.types(), []string{"tool/call", "approval/asked", "approval/decided", "tool/result"}) {
			t.Errorf("%s: log order %v", outcome, h.types())
		}
		h.checkInvariants()
	}
}

// TestAPR4_TimeoutDecidesCancelled: an ask nobody answers is decided cancelled after its
// timeout; the call fails with APPROVAL_CANCELLED (E1) and a late answer is a conflict.
func TestAPR4_TimeoutDecidesCancelled(t *testing.T) {
	t.Parallel()
	h, _ := approvalHarness(t, 30*time.Millisecond)
	h.post(eventlog.InboxNextTurn, `tool:echo args:{"text":"hi"}`)
	if r := h.serve(context.Background()); r[0].Kind != eventlog.EndCompleted {
		t.Fatalf("reasons %+v", r)
	}
	rs := results(t, h)
	if code(rs[0]) != fault.CodeApprovalCancelled || rs[0].Message.Content[0].Content[0].Text != `Error: approval for tool "echo" was cancelled` {
		t.Fatalf("result %+v", rs[0])
	}
	ds := h.ofType(eventlog.TypeApprovalDecided)
	if len(ds) != 1 || decode[eventlog.ApprovalDecided](t, ds[0].Data).Outcome != eventlog.ApprovalCancelled {
		t.Fatalf("decisions %v", ds)
	}
	asked := h.ofType(eventlog.TypeApprovalAsked)
	id := decode[eventlog.ApprovalAsked](t, asked[0].Data).ID
	if _, err := approval.Answer(context.Background(), h.j, readAll(h.j), id, eventlog.ApprovalAllowedOnce, ""); !errors.Is(err, approval.ErrAnswered) {
		t.Fatalf("late answer: %v", err)
	}
	h.checkInvariants()
}

// TestScenario10_CancelWhilePendingOverTheLog: cancelling the turn while an approval is pending
// decides it cancelled and the call ends ABORTED_BEFORE_DISPATCH, not a denial.
func TestScenario10_CancelWhilePendingOverTheLog(t *testing.T) {
	t.Parallel()
	h, _ := approvalHarness(t, time.Minute)
	h.post(eventlog.InboxNextTurn, `tool:echo args:{"text":"hi"}`)
	r := NewRunner(h.cfg, h.j)
	done := h.serveAsync(r)
	askedOnce(t, h)
	r.Interrupt(Cause{Kind: "user"})
	s := <-done
	if s.err != nil || s.reasons[0].Kind != eventlog.EndAborted {
		t.Fatalf("served %+v %v", s.reasons, s.err)
	}
	if rs := results(t, h); code(rs[0]) != fault.CodeAbortedBeforeDispatch {
		t.Fatalf("result %+v", rs[0])
	}
	if len(approval.Pending(h.j.Events())) != 0 || len(h.ofType(eventlog.TypeApprovalDecided)) != 1 {
		t.Fatalf("approvals left pending: %v", h.types())
	}
	h.checkInvariants()
}

// TestAPR2_AskOutsideASessionFails: an ask of a call with no session log (no recorder) fails
// without appending anything.
func TestAPR2_AskOutsideASessionFails(t *testing.T) {
	t.Parallel()
	h, _ := approvalHarness(t, time.Minute)
	res := h.reg.Execute(context.Background(), registry.Input{CallID: "c", Name: "echo", Agent: "s1",
		Args: []byte(`{"text":"x"}`)})
	if !res.IsError || res.Error == nil || !strings.Contains(res.Error.Message, "outside a session turn") || len(h.j.Events()) != 0 {
		t.Fatalf("result %+v, log %v", res, h.types())
	}
}
