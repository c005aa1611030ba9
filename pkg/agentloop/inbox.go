package agentloop

import (
	"encoding/json"
	"fmt"

	"github.com/dshd/dshd/pkg/llm"
)

// Inbox targets (LOOP-1).
const (
	TargetNextTurn = "next-turn"
	TargetNextStep = "next-step"
)

// OutcomeCanceled marks a splice that cleared the inbox on cancel (LOOP-7).
const OutcomeCanceled = "canceled"

// Splice is the data of an `agent/inbox/spliced` event: at Start in Target, RemovedCount messages
// are removed and Inserted are inserted. An insertion carries no removedCount; a claim at a step
// boundary is a deletion with no outcome; a cancel is a deletion with outcome "canceled".
type Splice struct {
	Target       string        `json:"target"`
	Start        int           `json:"start"`
	RemovedCount *int          `json:"removedCount,omitempty"`
	Inserted     []llm.Message `json:"inserted"`
	Outcome      string        `json:"outcome,omitempty"`
}

// Removed returns the number of removed messages.
func (s Splice) Removed() int {
	if s.RemovedCount == nil {
		return 0
	}
	return *s.RemovedCount
}

// Inbox is the durable inbox rebuilt from splice events: two FIFO lists of user messages. It is
// a value owned by one goroutine.
type Inbox struct {
	NextTurn []llm.Message
	NextStep []llm.Message
}

// Empty reports whether both lists are empty.
func (ib *Inbox) Empty() bool { return len(ib.NextTurn) == 0 && len(ib.NextStep) == 0 }

func (ib *Inbox) list(target string) (*[]llm.Message, error) {
	switch target {
	case TargetNextTurn:
		return &ib.NextTurn, nil
	case TargetNextStep:
		return &ib.NextStep, nil
	}
	return nil, fmt.Errorf("inbox: unknown target %q", target)
}

// Apply replays one splice. It fails, leaving the inbox unchanged, when the splice does not fit
// the current lists. Uniqueness of message ids (LOOP-1) is for the writers of insertions to
// ensure; replaying committed history never refuses a duplicate.
func (ib *Inbox) Apply(s Splice) error {
	l, err := ib.list(s.Target)
	if err != nil {
		return err
	}
	n := s.Removed()
	if s.Start < 0 || n < 0 || s.Start+n > len(*l) {
		return fmt.Errorf("inbox: splice %s at %d removing %d does not fit %d messages", s.Target, s.Start, n, len(*l))
	}
	out := make([]llm.Message, 0, len(*l)-n+len(s.Inserted))
	out = append(out, (*l)[:s.Start]...)
	out = append(out, s.Inserted...)
	out = append(out, (*l)[s.Start+n:]...)
	*l = out
	return nil
}

// ApplyEvent replays the data of an `agent/inbox/spliced` event.
func (ib *Inbox) ApplyEvent(data json.RawMessage) error {
	var s Splice
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("inbox: bad splice: %w", err)
	}
	return ib.Apply(s)
}

// Insertion returns the splice that appends msgs to the end of target given its current length.
func Insertion(target string, length int, msgs ...llm.Message) Splice {
	return Splice{Target: target, Start: length, Inserted: msgs}
}

// Deletion returns the splice that removes the first n messages of target; outcome is "" for a
// claim and OutcomeCanceled for a cancel.
func Deletion(target string, n int, outcome string) Splice {
	return Splice{Target: target, Start: 0, RemovedCount: &n, Inserted: []llm.Message{}, Outcome: outcome}
}
