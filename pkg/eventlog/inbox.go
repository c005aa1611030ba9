package eventlog

import (
	"encoding/json"
	"fmt"
)

// Inbox targets of `agent/inbox/spliced` (LOOP-1).
const (
	InboxNextTurn = "next-turn"
	InboxNextStep = "next-step"
)

// InboxLens are the lengths of a session's two inbox lists.
type InboxLens struct {
	NextTurn int
	NextStep int
}

type spliceShape struct {
	Target       string            `json:"target"`
	Start        *int              `json:"start"`
	RemovedCount *int              `json:"removedCount"`
	Inserted     []json.RawMessage `json:"inserted"`
}

// applySplice moves the lengths by one splice event's data and checks that it fits them.
func (l InboxLens) applySplice(data json.RawMessage) (InboxLens, error) {
	var s spliceShape
	if err := json.Unmarshal(data, &s); err != nil {
		return l, fmt.Errorf("bad splice: %v", err)
	}
	n := &l.NextTurn
	switch s.Target {
	case InboxNextTurn:
	case InboxNextStep:
		n = &l.NextStep
	default:
		return l, fmt.Errorf("splice target must be next-turn or next-step, not %q", s.Target)
	}
	removed := 0
	if s.RemovedCount != nil {
		removed = *s.RemovedCount
	}
	if s.Start == nil || *s.Start < 0 || removed < 0 || *s.Start+removed > *n {
		return l, fmt.Errorf("splice of %s does not fit its %d messages", s.Target, *n)
	}
	*n += len(s.Inserted) - removed
	return l, nil
}

// after returns the lengths after the splices among evs, or a *ValidationError for one that does
// not fit.
func (l InboxLens) after(evs []Event) (InboxLens, error) {
	for _, ev := range evs {
		if ev.Type != TypeInboxSpliced {
			continue
		}
		var err error
		if l, err = l.applySplice(ev.Data); err != nil {
			return l, &ValidationError{Seq: ev.Seq, Type: ev.Type, Rule: "LOOP-1", Reason: err.Error()}
		}
	}
	return l, nil
}
