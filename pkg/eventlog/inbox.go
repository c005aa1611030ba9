package eventlog

import (
	"fmt"

	"github.com/dshd/dshd/pkg/llm"
)

// Inbox targets of `agent/inbox/spliced` (LOOP-1).
const (
	InboxNextTurn = "next-turn"
	InboxNextStep = "next-step"
)

// OutcomeCanceled marks a splice that cleared the inbox on cancel (LOOP-7).
const OutcomeCanceled = "canceled"

// Removed returns the number of messages the splice removes.
func (s InboxSpliced) Removed() int {
	if s.RemovedCount == nil {
		return 0
	}
	return *s.RemovedCount
}

// Insertion returns the splice that appends msgs to the end of target given its current length.
func Insertion(target string, length int, msgs ...llm.Message) InboxSpliced {
	if msgs == nil {
		msgs = []llm.Message{}
	}
	return InboxSpliced{Target: target, Start: length, Inserted: msgs}
}

// Deletion returns the splice that removes the first n messages of target; outcome is "" for a
// claim and OutcomeCanceled for a cancel.
func Deletion(target string, n int, outcome string) InboxSpliced {
	return InboxSpliced{Target: target, Start: 0, RemovedCount: &n, Inserted: []llm.Message{}, Outcome: outcome}
}

// InboxLens are the lengths of a session's two inbox lists. It is the one fold of splice
// accounting: the in-memory journal, the PostgreSQL store and the runner's inbox all check a
// splice with Apply.
type InboxLens struct {
	NextTurn int
	NextStep int
}

func (l *InboxLens) of(target string) (*int, error) {
	switch target {
	case InboxNextTurn:
		return &l.NextTurn, nil
	case InboxNextStep:
		return &l.NextStep, nil
	}
	return nil, fmt.Errorf("splice target must be next-turn or next-step, not %q", target)
}

// Len returns the length of target (0 for an unknown target).
func (l InboxLens) Len(target string) int {
	if n, err := l.of(target); err == nil {
		return *n
	}
	return 0
}

// Apply returns the lengths after splice s, or an error when s does not fit them (LOOP-1).
func (l InboxLens) Apply(s InboxSpliced) (InboxLens, error) {
	n, err := l.of(s.Target)
	if err != nil {
		return l, err
	}
	removed := s.Removed()
	if s.Start < 0 || removed < 0 || s.Start+removed > *n {
		return l, fmt.Errorf("splice of %s at %d removing %d does not fit its %d messages", s.Target, s.Start, removed, *n)
	}
	*n += len(s.Inserted) - removed
	return l, nil
}

// After returns the lengths after the splices among evs, or a *ValidationError (rule LOOP-1) for
// the first one that does not fit.
func (l InboxLens) After(evs []Event) (InboxLens, error) {
	for _, ev := range evs {
		if ev.Type != TypeInboxSpliced {
			continue
		}
		s, err := View[InboxSpliced](ev)
		if err == nil {
			l, err = l.Apply(s)
		}
		if err != nil {
			return l, &ValidationError{Seq: ev.Seq, Type: ev.Type, Rule: "LOOP-1", Reason: err.Error()}
		}
	}
	return l, nil
}

// Inbox is the durable inbox rebuilt from splice events: two FIFO lists of user messages. It is
// a value owned by one goroutine.
type Inbox struct {
	NextTurn []llm.Message
	NextStep []llm.Message
}

// Empty reports whether both lists are empty.
func (ib *Inbox) Empty() bool { return len(ib.NextTurn) == 0 && len(ib.NextStep) == 0 }

// Lens returns the lengths of the lists.
func (ib *Inbox) Lens() InboxLens {
	return InboxLens{NextTurn: len(ib.NextTurn), NextStep: len(ib.NextStep)}
}

// List returns the messages of target.
func (ib *Inbox) List(target string) []llm.Message {
	if target == InboxNextTurn {
		return ib.NextTurn
	}
	return ib.NextStep
}

// Has reports whether a message with id waits in either list.
func (ib *Inbox) Has(id string) bool {
	for _, lst := range [][]llm.Message{ib.NextTurn, ib.NextStep} {
		for _, m := range lst {
			if m.ID == id {
				return true
			}
		}
	}
	return false
}

// Apply replays one splice. It fails, leaving the inbox unchanged, when the splice does not fit
// the current lists. Uniqueness of message ids (LOOP-1) is for the writers of insertions to
// ensure; replaying committed history never refuses a duplicate.
func (ib *Inbox) Apply(s InboxSpliced) error {
	if _, err := ib.Lens().Apply(s); err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	l := &ib.NextTurn
	if s.Target == InboxNextStep {
		l = &ib.NextStep
	}
	n := s.Removed()
	out := make([]llm.Message, 0, len(*l)-n+len(s.Inserted))
	out = append(out, (*l)[:s.Start]...)
	out = append(out, s.Inserted...)
	out = append(out, (*l)[s.Start+n:]...)
	*l = out
	return nil
}

// ApplyEvent replays an `agent/inbox/spliced` event.
func (ib *Inbox) ApplyEvent(ev Event) error {
	s, err := View[InboxSpliced](ev) // Apply copies the messages, never changes them
	if err != nil {
		return fmt.Errorf("inbox: bad splice: %w", err)
	}
	return ib.Apply(s)
}
