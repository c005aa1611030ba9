package eventlog

import (
	"encoding/json"
	"fmt"

	"github.com/dshd/dshd/pkg/fault"
)

// InvariantError is a broken relational invariant (SES-10) at the event with seq Seq.
type InvariantError struct {
	Seq    int64
	Type   string
	Reason string
}

func (e *InvariantError) Error() string {
	return fmt.Sprintf("eventlog: SES-10 invariant broken at seq %d (%s): %s", e.Seq, e.Type, e.Reason)
}

// trace is the relational state of a log walked in order.
type trace struct {
	openTurn, openStep int64 // 0 when none is open
	nextTurn, nextStep int64
	pending            map[string]bool // call ids with a tool/call in the open step
	// parked is the open turn's park (E6) while no turn/resumed followed it; answered holds the
	// calls with a tool/client-result in the open turn.
	parked   *TurnParked
	answered map[string]bool
}

// CheckInvariants is the optional relational checker of SES-10 over a whole log (seqs in order):
//   - turn/start numbers are consecutive from the first one and turns do not nest; turn/end
//     matches the open turn and requires no open step;
//   - step numbers restart at 1 in each turn and increase by one; assistant/chunk,
//     assistant/message, tool/call and tool/result (append) are inside the open step and name it;
//   - a tool/result append has an earlier tool/call with its callId in the same step, unless it is
//     a synthetic TOOL_NOT_STARTED result; a tool/result replacement is inside a turn;
//   - todo/write, request/header and request/context are inside a turn;
//   - parked turns (E6): turn/parked is inside a turn, in the step it names (a handover's between
//     steps, naming the last); while a turn is parked, nothing of a turn or step is written
//     (only answers, cancels and inbox changes) until its turn/resumed, which names the park's
//     turn and step; a call has at most one tool/client-result.
//
// It returns the first violation as an *InvariantError, or nil. Other packages' tests use it to
// check the logs they produce.
func CheckInvariants(events []Event) error {
	t := trace{nextStep: 1, pending: map[string]bool{}}
	for i, ev := range events {
		if i > 0 && ev.Seq <= events[i-1].Seq {
			return &InvariantError{ev.Seq, ev.Type, "seqs must increase"}
		}
		if reason := t.step(ev); reason != "" {
			return &InvariantError{ev.Seq, ev.Type, reason}
		}
	}
	return nil
}

func (t *trace) step(ev Event) string {
	if t.parked != nil {
		if r := t.whileParked(ev); r != "" {
			return r
		}
	}
	switch ev.Type {
	case TypeTurnParked:
		return t.park(ev)
	case TypeTurnResumed:
		d, _ := Decode[TurnResumed](ev)
		switch {
		case t.parked == nil:
			return "turn/resumed of a turn that is not parked"
		case int64(d.Turn) != t.openTurn || d.Step != t.parked.Step:
			return fmt.Sprintf("turn/resumed names turn %d step %d, the park is of turn %d step %d", d.Turn, d.Step, t.openTurn, t.parked.Step)
		}
		t.parked = nil
	case TypeClientResult:
		d, _ := Decode[ClientResult](ev)
		if t.answered[d.CallID] {
			return fmt.Sprintf("a second tool/client-result for call %s", d.CallID)
		}
		if t.answered == nil {
			t.answered = map[string]bool{}
		}
		t.answered[d.CallID] = true
	case TypeTurnStart:
		d, _ := Decode[TurnStart](ev)
		turn := int64(d.Turn)
		switch {
		case t.openTurn != 0:
			return fmt.Sprintf("turn/start %d while turn %d is open", turn, t.openTurn)
		case t.nextTurn != 0 && turn != t.nextTurn:
			return fmt.Sprintf("turn/start %d, want %d", turn, t.nextTurn)
		}
		t.openTurn, t.nextTurn, t.nextStep = turn, turn+1, 1
		clear(t.answered)
	case TypeTurnEnd:
		d, _ := Decode[TurnEnd](ev)
		switch {
		case t.openTurn == 0 || int64(d.Turn) != t.openTurn:
			return fmt.Sprintf("turn/end %d does not match the open turn %d", d.Turn, t.openTurn)
		case t.openStep != 0:
			return fmt.Sprintf("turn/end while step %d is open", t.openStep)
		}
		t.openTurn = 0
	case TypeStepStart:
		d, _ := Decode[StepStart](ev)
		switch {
		case t.openTurn == 0 || int64(d.Turn) != t.openTurn:
			return fmt.Sprintf("step/start in turn %d, open turn is %d", d.Turn, t.openTurn)
		case t.openStep != 0:
			return fmt.Sprintf("step/start while step %d is open", t.openStep)
		case int64(d.Step) != t.nextStep:
			return fmt.Sprintf("step/start %d, want %d", d.Step, t.nextStep)
		}
		t.openStep = t.nextStep
	case TypeStepEnd:
		if r := t.inStep(ev); r != "" {
			return r
		}
		t.openStep, t.nextStep = 0, t.nextStep+1
		clear(t.pending)
	case TypeAssistantChunk, TypeAssistantMessage:
		return t.inStep(ev)
	case TypeToolCall:
		if r := t.inStep(ev); r != "" {
			return r
		}
		d, _ := Decode[ToolCall](ev)
		t.pending[d.CallID] = true
	case TypeToolResult:
		return t.result(ev)
	case TypeTodoWrite, TypeRequestHeader, TypeRequestContext:
		if t.openTurn == 0 {
			return ev.Type + " outside a turn"
		}
	}
	return ""
}

// park checks a turn/parked and records it.
func (t *trace) park(ev Event) string {
	d, err := Decode[TurnParked](ev)
	if err != nil {
		return err.Error()
	}
	switch {
	case t.openTurn == 0 || int64(d.Turn) != t.openTurn:
		return fmt.Sprintf("turn/parked names turn %d, open turn is %d", d.Turn, t.openTurn)
	case t.parked != nil:
		return "turn/parked of a turn that is parked"
	case d.Reason == ParkHandover && (t.openStep != 0 || int64(d.Step) != t.nextStep-1):
		return fmt.Sprintf("a handover names step %d, the last step that ended is %d (open: %d)", d.Step, t.nextStep-1, t.openStep)
	case d.Reason != ParkHandover && int64(d.Step) != t.openStep:
		return fmt.Sprintf("turn/parked names step %d, open step is %d", d.Step, t.openStep)
	}
	t.parked = &d
	return ""
}

// whileParked refuses what a parked turn cannot write: anything of a turn or step before its
// turn/resumed.
func (t *trace) whileParked(ev Event) string {
	switch ev.Type {
	case TypeTurnStart, TypeTurnEnd, TypeStepStart, TypeStepEnd, TypeAssistantChunk, TypeAssistantMessage,
		TypeToolCall, TypeToolResult, TypeRequestHeader, TypeRequestContext, TypeApprovalAsked, TypeTodoWrite:
		return ev.Type + " while the turn is parked"
	}
	return ""
}

func (t *trace) inStep(ev Event) string {
	turn, step := stepOf(ev)
	if t.openTurn == 0 || t.openStep == 0 || turn != t.openTurn || step != t.openStep {
		return fmt.Sprintf("%s names turn %d step %d, open is turn %d step %d",
			ev.Type, turn, step, t.openTurn, t.openStep)
	}
	return ""
}

func (t *trace) result(ev Event) string {
	if ev.SurfaceOp != nil && ev.SurfaceOp.Replace {
		if t.openTurn == 0 {
			return "tool/result replacement outside a turn"
		}
		return ""
	}
	if r := t.inStep(ev); r != "" {
		return r
	}
	d, _ := Decode[ToolResult](ev)
	id := d.Message.Source.CallID
	notStarted := d.Error != nil && d.Error.Code == fault.CodeToolNotStarted
	if !t.pending[id] && !notStarted {
		return fmt.Sprintf("tool/result for %s without an earlier tool/call in this step", id)
	}
	delete(t.pending, id)
	return ""
}

// stepOf returns the turn and step an in-step event names (0, 0 when it names none).
func stepOf(ev Event) (turn, step int64) {
	var d StepStart
	_ = json.Unmarshal(ev.Data, &d)
	return int64(d.Turn), int64(d.Step)
}
