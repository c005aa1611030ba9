package eventlog

import (
	"fmt"
	"slices"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
)

// Texts of the synthetic crash-repair results (SES-14).
const (
	OutcomeUnknownText = "The tool call was recorded as started, but the run was interrupted before " +
		"its result was recorded, so its outcome is unknown. Retry it only if the operation is " +
		"read-only or idempotent; otherwise check the external state first (or ask the user) " +
		"before doing it again."
	NotStartedText = "The tool call was interrupted before it started, so it had no effect. " +
		"You may retry it if it is still needed."
)

// OpenTurn returns the turn left open at the end of events (a log or any suffix of it that
// starts at or before the last turn/start): the last turn/start that has no turn/end after it.
func OpenTurn(events []Event) (turn int64, open bool) {
	for i := len(events) - 1; i >= 0; i-- {
		switch events[i].Type {
		case TypeTurnEnd:
			return 0, false
		case TypeTurnStart:
			d, _ := Decode[TurnStart](events[i])
			return int64(d.Turn), true
		}
	}
	return 0, false
}

type pendingCall struct {
	id      string
	step    int
	callSeq int64 // -1 when no tool/call was logged
}

// Closers returns the events that close a log whose last turn is still open (SES-14), in order:
// an approval/decided {outcome: cancelled} for every approval of the open turn that has none
// (the call that waited for it is gone), a tool/result for every tool call of the open step's assistant message that has no result
// (TOOL_OUTCOME_UNKNOWN citing the tool/call seq when the call was logged, TOOL_NOT_STARTED
// otherwise), step/end if a step is open, then turn/end {reason:{kind:'interrupted'}}. The
// closers continue the seqs and reuse the time of the last event. A balanced or empty log gets
// nil, and so does a parked turn (E6: it waits for an answer, not for repair). events may be the
// suffix of a log that starts at its last turn/start.
func Closers(events []Event) []Event {
	if _, parked := Parked(events); parked {
		return nil // a parked turn is not open work (E6)
	}
	var (
		turn, step int
		inTurn     bool
		inStep     bool
		pending    []pendingCall
		asked      []string // approvals of the open turn without a decision
	)
	for _, ev := range events {
		switch ev.Type {
		case TypeTurnStart:
			d, _ := Decode[TurnStart](ev)
			turn, inTurn, inStep, pending, asked = d.Turn, true, false, nil, nil
		case TypeTurnEnd:
			inTurn, inStep, pending, asked = false, false, nil, nil
		case TypeApprovalAsked:
			d, _ := Decode[ApprovalAsked](ev)
			asked = append(asked, d.ID)
		case TypeApprovalDecided:
			d, _ := Decode[ApprovalDecided](ev)
			asked = slices.DeleteFunc(asked, func(id string) bool { return id == d.ID })
		case TypeStepStart:
			d, _ := Decode[StepStart](ev)
			step, inStep = d.Step, true
		case TypeStepEnd:
			inStep, pending = false, nil
		case TypeAssistantMessage:
			d, _ := Decode[AssistantMessage](ev)
			for _, b := range d.Message.ToolCalls() {
				pending = append(pending, pendingCall{id: b.ID, step: d.Step, callSeq: -1})
			}
		case TypeToolCall:
			d, _ := Decode[ToolCall](ev)
			for i := range pending {
				if pending[i].id == d.CallID {
					pending[i].callSeq = ev.Seq
				}
			}
		case TypeToolResult:
			d, _ := Decode[ToolResult](ev)
			pending = slices.DeleteFunc(pending, func(p pendingCall) bool { return p.id == d.Message.Source.CallID })
		}
	}
	if !inTurn || len(events) == 0 {
		return nil
	}
	last := events[len(events)-1]
	seq, now := last.Seq+1, last.Time
	var out []Event
	add := func(p Payload, op *SurfaceOp, sources []int64) {
		raw, _ := marshalPayload(p)
		out = append(out, Event{Type: p.Type(), Seq: seq, Time: now, Data: raw, SurfaceOp: op, SourceEventSeqs: sources})
		seq++
	}
	for _, id := range asked {
		add(ApprovalDecided{ID: id, Outcome: ApprovalCancelled, Reason: "the turn was interrupted"}, nil, nil)
	}
	for _, p := range pending {
		text, info, sources := NotStartedText, fault.Info{Name: "ToolNotStartedError", Code: fault.CodeToolNotStarted}, []int64(nil)
		if p.callSeq >= 0 {
			text, sources = OutcomeUnknownText, []int64{p.callSeq}
			info = fault.Info{Name: "ToolOutcomeUnknownError", Code: fault.CodeToolOutcomeUnknown}
		}
		msg := llm.NewToolResultMessage(fmt.Sprintf("interrupted-tool-result-%s-%d", p.id, seq), p.id,
			[]llm.Block{llm.TextBlock(text)}, true)
		add(ToolResult{Turn: turn, Step: p.step, Message: msg, Error: &info}, Append, sources)
	}
	if inStep {
		add(StepEnd{Turn: turn, Step: step}, nil, nil)
	}
	add(TurnEnd{Turn: turn, Reason: TurnReason{Kind: EndInterrupted}}, nil, nil)
	return out
}
