package eventlog

import (
	"encoding/json"
	"slices"

	"github.com/dshd/dshd/pkg/llm"
)

// The read model of a turn: what every reader of the log (the turn resource and the session's
// status over HTTP, the webhooks a batch causes, the usage tables, the dashboard through the turn
// resource) knows of a turn is folded here, from the events alone, by one rule.

// Cause kinds of an aborted turn (TurnReason.Reason, LOOP-8).
const (
	CauseUser     = "user"     // cancelled over HTTP
	CauseDisposed = "disposed" // the replica stopped or lost the session's lease
	CauseParent   = "parent"   // the reference's: a parent agent aborted
	CauseHook     = "hook"     // the reference's: a hook aborted, with a reason
)

// Outcome is how a turn ended, as every reader names it: turn/end's reason kind, with aborted
// split into cancelled (by a person) and aborted (by the server).
type Outcome string

// Outcomes of an ended turn.
const (
	OutcomeCompleted   Outcome = "completed"
	OutcomeCancelled   Outcome = "cancelled"
	OutcomeAborted     Outcome = "aborted"
	OutcomeFailed      Outcome = "failed"
	OutcomeMaxTokens   Outcome = "max-tokens"
	OutcomeInterrupted Outcome = "interrupted"
	OutcomeBlocked     Outcome = "blocked"
)

// TurnOutcome is the outcome rule: the Outcome of a turn that ended with reason r. A kind outside
// LOOP-8 is its own outcome.
func TurnOutcome(r TurnReason) Outcome {
	switch r.Kind {
	case EndAborted:
		if r.Reason != nil && r.Reason.Kind == CauseUser {
			return OutcomeCancelled
		}
		return OutcomeAborted
	case EndError:
		return OutcomeFailed
	}
	return Outcome(r.Kind)
}

// Failed reports whether a turn with this outcome failed: it ended on an error (a model or
// prompt failure, the step limit), or crash repair closed it interrupted (its work was lost).
// The turn.failed webhook and the turn resource's failed flag say the same.
func (o Outcome) Failed() bool { return o == OutcomeFailed || o == OutcomeInterrupted }

// TurnKinds returns the event kinds FoldTurns reads: a reader may filter the log by them.
func TurnKinds() []string {
	out := []string{TypeTurnStart, TypeTurnEnd, TypeStepStart, TypeUserMessage, TypeApprovalAsked, TypeApprovalDecided, TypeTurnTrace}
	for _, k := range usageKinds {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// TurnSummary is one turn as folded from the log.
type TurnSummary struct {
	Turn     int
	FirstSeq int64 // the turn/start
	// LastSeq is the turn/end, or the last seq of the folded events' log while the turn is open.
	LastSeq int64
	StartMs int64 // the turn/start's time (epoch ms)
	EndMs   int64 // the turn/end's time, 0 while open
	Open    bool
	// Reason is turn/end's reason as written (nil while open); Outcome its TurnOutcome.
	Reason    json.RawMessage
	EndReason TurnReason
	Outcome   Outcome
	Steps     int
	// MessageIDs are the posted (source kind user) messages the turn entered, in order.
	MessageIDs []string
	// Pending are the ids of the turn's approvals asked and not decided, in the order asked.
	Pending []string
	Usage   Usage
	// TraceIDs are the trace ids of the turn's spans (turn/trace), in order: one per loop
	// instance that ran it (a parked turn resumed gets another); none when it was not traced.
	TraceIDs []string
}

// FoldTurns folds events (in seq order; any kinds, those of TurnKinds suffice) into turns, in
// order. Events before the first turn/start, and events whose data does not decode, are
// skipped. An open turn gets last as its LastSeq.
func FoldTurns(evs []Event, last int64) []TurnSummary {
	var out []TurnSummary
	for _, ev := range evs {
		if ev.Type == TypeTurnStart {
			var d TurnStart
			if json.Unmarshal(ev.Data, &d) != nil {
				continue
			}
			out = append(out, TurnSummary{Turn: d.Turn, FirstSeq: ev.Seq, LastSeq: last, StartMs: ev.Time,
				Open: true, MessageIDs: []string{}, TraceIDs: []string{}})
		}
		if len(out) == 0 || !out[len(out)-1].Open {
			continue
		}
		out[len(out)-1].add(ev)
	}
	return out
}

// add folds ev into the open turn t.
func (t *TurnSummary) add(ev Event) {
	if _, u, ok := EventUsage(ev); ok {
		t.Usage.Add(u)
	}
	switch ev.Type {
	case TypeTurnEnd:
		var d struct {
			Reason json.RawMessage `json:"reason"`
		}
		var reason TurnReason
		if json.Unmarshal(ev.Data, &d) != nil || json.Unmarshal(d.Reason, &reason) != nil {
			return
		}
		t.Reason, t.EndReason, t.Outcome = d.Reason, reason, TurnOutcome(reason)
		t.LastSeq, t.EndMs, t.Open, t.Pending = ev.Seq, ev.Time, false, nil
	case TypeStepStart:
		t.Steps++
	case TypeUserMessage:
		var m UserMessage
		if json.Unmarshal(ev.Data, &m) == nil && m.Source.Kind == llm.SourceUser {
			t.MessageIDs = append(t.MessageIDs, m.ID)
		}
	case TypeApprovalAsked:
		if a, err := Decode[ApprovalAsked](ev); err == nil {
			t.Pending = append(t.Pending, a.ID)
		}
	case TypeApprovalDecided:
		if d, err := Decode[ApprovalDecided](ev); err == nil {
			t.Pending = slices.DeleteFunc(t.Pending, func(id string) bool { return id == d.ID })
		}
	case TypeTurnTrace:
		if d, err := Decode[TurnTrace](ev); err == nil && d.Turn == t.Turn && !slices.Contains(t.TraceIDs, d.TraceID) {
			t.TraceIDs = append(t.TraceIDs, d.TraceID)
		}
	}
}

// TurnNumber returns the turn an event of a turn's or a step's kind names (turn/start,
// turn/end, step/start, step/end and the kinds that carry turn and step), and false when its
// data names none.
func TurnNumber(ev Event) (int, bool) {
	if n, ok := preparedTurn(ev.payload); ok {
		return n, true
	}
	var d struct {
		Turn *int `json:"turn"`
	}
	if json.Unmarshal(ev.Data, &d) != nil || d.Turn == nil {
		return 0, false
	}
	return *d.Turn, true
}

// preparedTurn is the turn of a payload of a kind whose data always names one.
func preparedTurn(p Payload) (int, bool) {
	switch p := p.(type) {
	case TurnStart:
		return p.Turn, true
	case TurnEnd:
		return p.Turn, true
	case StepStart:
		return p.Turn, true
	case StepEnd:
		return p.Turn, true
	case AssistantChunk:
		return p.Turn, true
	case AssistantMessage:
		return p.Turn, true
	case ToolCall:
		return p.Turn, true
	case ToolResult:
		return p.Turn, true
	case LLMRetry:
		return p.Turn, true
	case TurnTrace:
		return p.Turn, true
	case AssistantUsage:
		return p.Turn, true
	case TurnParked:
		return p.Turn, true
	case TurnResumed:
		return p.Turn, true
	}
	return 0, false
}

// MessageID returns the id of a user/message event's message, and false for another event.
func MessageID(ev Event) (string, bool) {
	if ev.Type != TypeUserMessage {
		return "", false
	}
	if m, ok := prepared[UserMessage](ev); ok {
		return m.ID, true
	}
	var m struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(ev.Data, &m) != nil {
		return "", false
	}
	return m.ID, true
}

// SpliceSize is what an agent/inbox/spliced event does to the sizes of its list: at Start,
// Removed messages are removed and messages of Inserted bytes each (the length of each inserted
// message's JSON in the splice) are inserted. It is the one reading of a splice's sizes: the
// store's inbox bound (migration 00008) counts it.
type SpliceSize struct {
	Target   string
	Start    int
	Removed  int
	Inserted []int
	Outcome  string
}

// SpliceSizeOf returns the sizes of a splice event, and false for another event or data that
// does not decode.
func SpliceSizeOf(ev Event) (SpliceSize, bool) {
	if ev.Type != TypeInboxSpliced {
		return SpliceSize{}, false
	}
	if p, ok := prepared[InboxSpliced](ev); ok && len(p.Inserted) == 0 {
		// A deletion (a claim, a cancel): no message sizes to measure in the data.
		return SpliceSize{Target: p.Target, Start: p.Start, Removed: p.Removed(), Outcome: p.Outcome, Inserted: []int{}}, true
	}
	var s struct {
		Target       string            `json:"target"`
		Start        int               `json:"start"`
		RemovedCount int               `json:"removedCount"`
		Inserted     []json.RawMessage `json:"inserted"`
		Outcome      string            `json:"outcome"`
	}
	if json.Unmarshal(ev.Data, &s) != nil {
		return SpliceSize{}, false
	}
	out := SpliceSize{Target: s.Target, Start: s.Start, Removed: s.RemovedCount, Outcome: s.Outcome,
		Inserted: make([]int, len(s.Inserted))}
	for i, m := range s.Inserted {
		out.Inserted[i] = len(m)
	}
	return out, true
}
