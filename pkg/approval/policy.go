package approval

import (
	"context"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
)

// Approval policies (APR-4, APR-6): under ask an ask waits for a person; under never it is
// decided `rejected` at once and nobody is asked. They are the values of a preset's
// approval.policy and of `approval/policy` events.
const (
	PolicyAsk   = "ask"
	PolicyNever = "never"
)

// The runtime-context entry that states a session's policy to the model (APR-6).
const (
	PolicyContextName  = "approval:policy"
	PolicyContextOrder = 115
)

// The source of the notice a policy change injects into the session's inbox (APR-6): a
// plugin-source user message the model reads at its next step.
const (
	NoticePlugin = "approval"
	NoticeForm   = "policy"
)

// ValidPolicy reports whether p is a policy.
func ValidPolicy(p string) bool { return p == PolicyAsk || p == PolicyNever }

// LoggedPolicy returns the policy of the last valid `approval/policy` event among evs; ok is
// false when there is none.
func LoggedPolicy(evs []eventlog.Event) (policy string, ok bool) {
	for i := len(evs) - 1; i >= 0; i-- {
		if p, found := PolicyOf(evs[i]); found {
			return p, true
		}
	}
	return "", false
}

// PolicyOf returns the policy an event sets: ok only for an `approval/policy` event with a valid
// policy (an unknown value is ignored, so the policy in force stays).
func PolicyOf(ev eventlog.Event) (policy string, ok bool) {
	if ev.Type != eventlog.TypeApprovalPolicy {
		return "", false
	}
	d, err := eventlog.Decode[eventlog.ApprovalPolicy](ev)
	if err != nil || !ValidPolicy(d.Policy) {
		return "", false
	}
	return d.Policy, true
}

// Effective is the policy in force (APR-4 step 2): the session's last `approval/policy` event
// (logged, "" for none), else the configured one (the preset's approval.policy), else ask.
func Effective(logged, configured string) string {
	switch {
	case ValidPolicy(logged):
		return logged
	case ValidPolicy(configured):
		return configured
	}
	return PolicyAsk
}

// PolicyText is the text of the runtime-context entry approval:policy for policy p.
func PolicyText(p string) string {
	if p == PolicyNever {
		return "Tool approval policy: never. A tool call that needs approval is rejected at once; nobody is asked."
	}
	return "Tool approval policy: ask. A tool call that needs approval waits until a person allows or rejects it; an approval covers that one call only."
}

// NoticeText is the text of the notice of a change of the policy to p.
func NoticeText(p string) string {
	if p == PolicyNever {
		return `The tool approval policy was changed to "never": from now on a tool call that needs approval is rejected without asking anyone.`
	}
	return `The tool approval policy was changed to "ask": from now on a tool call that needs approval waits until a person allows or rejects it.`
}

// Notice returns the notice message of a change of the policy to p.
func Notice(id, p string) llm.Message {
	return llm.Message{ID: id, Role: llm.RoleUser, Content: []llm.Block{llm.TextBlock(NoticeText(p))},
		Source: llm.Source{Kind: llm.SourcePlugin, Plugin: NoticePlugin, Form: NoticeForm}}
}

// SetPolicy changes the approval policy of the session behind j (an unfenced journal; any
// replica), in one append: `approval/policy {policy}` and the notice of the change at the end of
// the inbox's next-step list, where injected messages go, so the model reads it at its next step
// (the running turn's, or the next turn's first). A policy other than ask or never is refused
// (fault.Invalid) and nothing is appended. It returns the committed events.
func SetPolicy(ctx context.Context, j eventlog.Journal, policy string) ([]eventlog.Event, error) {
	if !ValidPolicy(policy) {
		return nil, fault.New(fault.Invalid, `policy must be "ask" or "never"`)
	}
	notice := Notice(uuid.NewString(), policy)
	evs, err := j.Append(ctx, func(h eventlog.Head) ([]eventlog.NewEvent, error) {
		return []eventlog.NewEvent{
			eventlog.Of(eventlog.ApprovalPolicy{Policy: policy}),
			eventlog.Of(eventlog.Insertion(eventlog.InboxNextStep, h.Inbox.Len(eventlog.InboxNextStep), notice)),
		}, nil
	})
	return evs, err
}
