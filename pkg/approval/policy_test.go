package approval_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/approval"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
)

// TestAPR6_EffectivePolicyIsTheLastLoggedElseTheConfigElseAsk: the policy in force is the last
// valid approval/policy event of the log, else the configured one, else ask; a logged value
// that is no policy is ignored.
func TestAPR6_EffectivePolicyIsTheLastLoggedElseTheConfigElseAsk(t *testing.T) {
	t.Parallel()
	j := eventlog.NewMemJournal(nil)
	if _, err := j.Append(context.Background(), eventlog.Batch(
		eventlog.Of(eventlog.ApprovalPolicy{Policy: "never"}),
		eventlog.Of(eventlog.ApprovalPolicy{Policy: "ask"}),
		eventlog.Of(eventlog.ApprovalPolicy{Policy: "sometimes"}),
	)); err != nil {
		t.Fatal(err)
	}
	evs := j.Events()
	for _, c := range []struct {
		name             string
		evs              []eventlog.Event
		configured, want string
	}{
		{"the last valid logged policy", evs, "never", "ask"},
		{"the first logged policy", evs[:1], "ask", "never"},
		{"the configured policy", nil, "never", "never"},
		{"the default", nil, "", "ask"},
		{"an unknown configured policy", nil, "sometimes", "ask"},
	} {
		logged, _ := approval.LoggedPolicy(c.evs)
		if got := approval.Effective(logged, c.configured); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	if p, ok := approval.LoggedPolicy(evs[2:]); ok {
		t.Errorf("an unknown logged policy counted: %q", p)
	}
}

// TestAPR6_SetPolicyAppendsThePolicyAndInjectsANotice: SetPolicy appends approval/policy and,
// in the same batch, the notice of the change at the end of the inbox's next-step list (where
// injected messages wait for the next step), as a plugin-source user message; a value other than
// ask or never is refused as invalid and appends nothing.
func TestAPR6_SetPolicyAppendsThePolicyAndInjectsANotice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := eventlog.NewMemJournal(nil)
	waiting := llm.NewUserMessage("m1", "steered")
	if _, err := j.Append(ctx, eventlog.Batch(eventlog.Of(eventlog.Insertion(eventlog.InboxNextStep, 0, waiting)))); err != nil {
		t.Fatal(err)
	}
	evs, err := approval.SetPolicy(ctx, j, "never")
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Type != eventlog.TypeApprovalPolicy || evs[1].Type != eventlog.TypeInboxSpliced {
		t.Fatalf("appended %+v", evs)
	}
	if p, ok := approval.LoggedPolicy(evs); !ok || p != "never" {
		t.Fatalf("logged policy %q %v", p, ok)
	}
	sp, err := eventlog.Decode[eventlog.InboxSpliced](evs[1])
	if err != nil {
		t.Fatal(err)
	}
	if sp.Target != eventlog.InboxNextStep || sp.Start != 1 || len(sp.Inserted) != 1 {
		t.Fatalf("splice %+v, want one insertion at the end of next-step", sp)
	}
	m := sp.Inserted[0]
	if m.Role != llm.RoleUser || m.Source.Kind != llm.SourcePlugin || m.Source.Plugin != approval.NoticePlugin ||
		m.Source.Form != approval.NoticeForm || m.Text() != approval.NoticeText("never") {
		t.Fatalf("notice %+v", m)
	}
	if h := j.Head(); h.Inbox.Len(eventlog.InboxNextStep) != 2 {
		t.Fatalf("next-step holds %d, want the steered message and the notice", h.Inbox.Len(eventlog.InboxNextStep))
	}

	before := j.Latest()
	_, err = approval.SetPolicy(ctx, j, "allowed-always")
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Code != fault.Invalid {
		t.Fatalf("an unknown policy: %v, want an invalid-input fault", err)
	}
	if j.Latest() != before {
		t.Fatal("an unknown policy appended events")
	}
}

// TestAPR6_PolicyTextStatesThePolicy: the runtime-context entry and the notice name the policy.
func TestAPR6_PolicyTextStatesThePolicy(t *testing.T) {
	t.Parallel()
	if approval.PolicyContextName != "approval:policy" || approval.PolicyContextOrder != 115 {
		t.Fatalf("entry %q at %v", approval.PolicyContextName, approval.PolicyContextOrder)
	}
	for _, p := range []string{"ask", "never"} {
		if text := approval.PolicyText(p); text == approval.PolicyText(other(p)) || !strings.Contains(text, "policy: "+p) {
			t.Errorf("%s: %q", p, text)
		}
		if text := approval.NoticeText(p); !strings.Contains(text, `"`+p+`"`) {
			t.Errorf("%s notice: %q", p, text)
		}
	}
}

func other(p string) string {
	if p == "ask" {
		return "never"
	}
	return "ask"
}

// TestAPR6_PolicyNoticeReplacesOnlyAnUnreadOne: a change whose predecessor's notice waits
// unread replaces it in place (the same message id, the new text, the messages around it kept);
// once a step has claimed the notice, or a cancel has cleared it, the next change appends a new
// one at the end (issue 18: every change added a notice, unbounded).
func TestAPR6_PolicyNoticeReplacesOnlyAnUnreadOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := eventlog.NewMemJournal(nil)
	appendSplice := func(s eventlog.InboxSpliced) {
		t.Helper()
		if _, err := j.Append(ctx, eventlog.Batch(eventlog.Of(s))); err != nil {
			t.Fatal(err)
		}
	}
	set := func(p string) {
		t.Helper()
		if _, err := approval.SetPolicy(ctx, j, p); err != nil {
			t.Fatal(err)
		}
	}
	inbox := func() []string {
		var ib eventlog.Inbox
		for _, ev := range j.Events() {
			if ev.Type == eventlog.TypeInboxSpliced {
				if err := ib.ApplyEvent(ev); err != nil {
					t.Fatal(err)
				}
			}
		}
		var out []string
		for _, m := range ib.NextStep {
			out = append(out, m.ID+"="+m.Text())
		}
		return out
	}
	appendSplice(eventlog.Insertion(eventlog.InboxNextStep, 0, llm.NewUserMessage("a", "first")))
	set("never")
	first := inbox()[1]
	appendSplice(eventlog.Insertion(eventlog.InboxNextStep, 2, llm.NewUserMessage("b", "after")))
	set("ask")
	set("never")
	set("ask")
	id, _, _ := strings.Cut(first, "=")
	if got := inbox(); len(got) != 3 || got[0] != "a=first" || got[1] != id+"="+approval.NoticeText("ask") || got[2] != "b=after" {
		t.Fatalf("inbox %q, want the notice replaced in place", got)
	}
	appendSplice(eventlog.Deletion(eventlog.InboxNextStep, 2, "")) // a step claims a and the notice
	set("never")
	if got := inbox(); len(got) != 2 || got[0] != "b=after" || !strings.HasSuffix(got[1], "="+approval.NoticeText("never")) ||
		strings.HasPrefix(got[1], id+"=") {
		t.Fatalf("inbox %q, want a new notice after the claim", got)
	}
	appendSplice(eventlog.Deletion(eventlog.InboxNextStep, 2, eventlog.OutcomeCanceled))
	set("ask")
	if got := inbox(); len(got) != 1 || !strings.HasSuffix(got[0], "="+approval.NoticeText("ask")) {
		t.Fatalf("inbox %q, want a new notice after the cancel", got)
	}
}
