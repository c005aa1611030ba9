package approval

import (
	"context"
	"errors"
	"slices"

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

// EventReader reads the session's events as they are under the lock of the append that will
// follow (pgstore.EventReader, PostParams.Prepare).
type EventReader interface {
	Since(ctx context.Context, after int64, types []string, limit int) ([]eventlog.Event, error)
	Last(ctx context.Context, typ string) (ev eventlog.Event, ok bool, err error)
}

// PolicyChange is one change of a session's approval policy (APR-6): Read, under the append's
// lock, reads what it depends on, then Build appends `approval/policy {policy}` and the notice of
// the change, in one batch. The notice goes to the end of the inbox's next-step list, where
// injected messages go, so the model reads it at its next step; but a notice of an earlier change
// that no step has read yet is replaced in place instead (the same message id, the new text), so
// a session holds at most one unread policy notice whatever the number of changes. Setting the
// policy the last `approval/policy` set already appends nothing (Seq is then that event's).
type PolicyChange struct {
	policy string
	notice llm.Message // the notice, with a fresh id
	reuse  string      // the id of the unread notice it replaces
	last   int64       // seq of the last approval/policy, -1 for none
	same   bool        // the last approval/policy set this policy: append nothing
	unread int         // position in next-step of the last change's unread notice, -1 for none
	seq    int64
}

// NewPolicyChange returns the change of the policy to policy; a policy other than ask or never
// is refused (fault.Invalid).
func NewPolicyChange(policy string) (*PolicyChange, error) {
	if !ValidPolicy(policy) {
		return nil, fault.New(fault.Invalid, `policy must be "ask" or "never"`)
	}
	return &PolicyChange{policy: policy, notice: Notice(uuid.NewString(), policy), last: -1, unread: -1}, nil
}

// spliceReadPage is how many splices Read reads at a time while it follows the last notice.
const spliceReadPage = 256

// Read reads the last `approval/policy` and, when its notice may still be unread, follows the
// next-step list's splices since it, until the notice is read (claimed) or removed, or the log
// ends. Its cost is the splices between the last change and the first claim after it (a claim
// happens at every step), not the session's history.
func (c *PolicyChange) Read(ctx context.Context, r EventReader) error {
	c.same, c.unread, c.last, c.reuse = false, -1, -1, ""
	last, ok, err := r.Last(ctx, eventlog.TypeApprovalPolicy)
	if err != nil || !ok {
		return err
	}
	c.last = last.Seq
	if p, valid := PolicyOf(last); valid && p == c.policy {
		c.same = true
		return nil
	}
	after := last.Seq
	first := true
	for {
		evs, err := r.Since(ctx, after, []string{eventlog.TypeInboxSpliced}, spliceReadPage)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if first {
				first = false
				if c.unread = noticeAt(ev, last.Seq); c.unread < 0 {
					return nil // the change has no notice of its own (another writer)
				}
				c.reuse = noticeID(ev)
				continue
			}
			if c.unread = follow(ev, c.unread); c.unread < 0 {
				return nil
			}
		}
		if len(evs) < spliceReadPage {
			return nil
		}
		after = evs[len(evs)-1].Seq
	}
}

// noticeAt returns the position of the notice ev inserts when ev is the splice SetPolicy wrote
// right after the `approval/policy` at policySeq, else -1.
func noticeAt(ev eventlog.Event, policySeq int64) int {
	s, err := eventlog.Decode[eventlog.InboxSpliced](ev)
	if err != nil || ev.Seq != policySeq+1 || s.Target != eventlog.InboxNextStep || s.Removed() > 1 ||
		len(s.Inserted) != 1 || !isNotice(s.Inserted[0]) {
		return -1
	}
	return s.Start
}

func noticeID(ev eventlog.Event) string {
	s, _ := eventlog.Decode[eventlog.InboxSpliced](ev)
	return s.Inserted[0].ID
}

func isNotice(m llm.Message) bool {
	return m.Source.Kind == llm.SourcePlugin && m.Source.Plugin == NoticePlugin && m.Source.Form == NoticeForm
}

// follow returns the position, after splice ev, of the next-step message at pos, or -1 when ev
// removed it (a claim, a cancel, a replacement).
func follow(ev eventlog.Event, pos int) int {
	s, err := eventlog.Decode[eventlog.InboxSpliced](ev)
	if err != nil || s.Target != eventlog.InboxNextStep || s.Start > pos {
		return pos
	}
	removed := s.Removed()
	if pos < s.Start+removed {
		return -1
	}
	return pos - removed + len(s.Inserted)
}

// Build returns the change's batch for head h: nothing when the policy is already in force,
// else `approval/policy` and the notice's splice (a replacement of the unread notice, or an
// insertion at the end of next-step).
func (c *PolicyChange) Build(h eventlog.Head) ([]eventlog.NewEvent, error) {
	c.seq = c.last
	if c.same {
		return nil, nil
	}
	splice := eventlog.Insertion(eventlog.InboxNextStep, h.Inbox.Len(eventlog.InboxNextStep), c.notice)
	if c.unread >= 0 {
		one, notice := 1, c.notice
		notice.ID = c.reuse // a step that claims it as it was read still finds it (agentloop claims by id)
		splice = eventlog.InboxSpliced{Target: eventlog.InboxNextStep, Start: c.unread, RemovedCount: &one,
			Inserted: []llm.Message{notice}}
	}
	c.seq = h.Next
	return []eventlog.NewEvent{eventlog.Of(eventlog.ApprovalPolicy{Policy: c.policy}), eventlog.Of(splice)}, nil
}

// Seq returns the seq of the `approval/policy` event in force after the change: the one Build
// appended, or the earlier one that already set the policy. Valid after the append.
func (c *PolicyChange) Seq() int64 { return c.seq }

// Policy returns the policy the change sets.
func (c *PolicyChange) Policy() string { return c.policy }

// SetPolicy applies the change of the policy to policy (PolicyChange) to the session behind j
// (an unfenced journal; any replica) without the posting bounds and rates, which the HTTP path
// (the worker's post path) applies: it reads the log, then appends only if the log has not moved
// since (else it reads again). A policy other than ask or never is refused (fault.Invalid) and
// nothing is appended. It returns the committed events (none when the policy was in force).
func SetPolicy(ctx context.Context, j eventlog.Journal, policy string) ([]eventlog.Event, error) {
	c, err := NewPolicyChange(policy)
	if err != nil {
		return nil, err
	}
	for attempt := 0; attempt < 8; attempt++ {
		all, err := j.Since(ctx, -1)
		if err != nil {
			return nil, err
		}
		if err := c.Read(ctx, eventsReader(all)); err != nil {
			return nil, err
		}
		evs, err := j.Append(ctx, func(h eventlog.Head) ([]eventlog.NewEvent, error) {
			if h.Next != int64(len(all)) {
				return nil, eventlog.ErrStale
			}
			return c.Build(h)
		})
		if !errors.Is(err, eventlog.ErrStale) {
			return evs, err
		}
	}
	return nil, fault.New(fault.Conflict, "the session kept moving; set the policy again")
}

// eventsReader is the EventReader of a whole log read into memory.
type eventsReader []eventlog.Event

func (evs eventsReader) Since(_ context.Context, after int64, types []string, limit int) ([]eventlog.Event, error) {
	var out []eventlog.Event
	for _, ev := range evs {
		if ev.Seq > after && (types == nil || slices.Contains(types, ev.Type)) && (limit <= 0 || len(out) < limit) {
			out = append(out, ev)
		}
	}
	return out, nil
}

func (evs eventsReader) Last(_ context.Context, typ string) (eventlog.Event, bool, error) {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == typ {
			return evs[i], true, nil
		}
	}
	return eventlog.Event{}, false, nil
}
