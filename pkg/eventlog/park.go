package eventlog

import (
	"errors"
	"fmt"

	"github.com/dshd/dshd/pkg/llm"
)

// Extension E6: parked turns. A turn parks when it waits only on something outside the server
// (an approval answer, a client-executed tool's result): the runner commits `turn/parked` naming
// what it waits for and gives up its lease and turn slot, leaving the turn open. Whoever supplies
// the answer (any replica) appends it (`approval/decided`, `tool/client-result`) and wakes the
// session; the next lease holder resumes the turn as a new loop instance: it commits
// `turn/resumed` first, then continues the parked step. A draining replica hands a running turn
// over the same way at a step boundary (`turn/parked` with reason handover and no waits).
//
// A parked turn is not open work: crash repair (Closers) leaves it alone.

// Kinds of parked turns, wait kinds and event types of extension E6.
const (
	TypeTurnParked   = "turn/parked"
	TypeTurnResumed  = "turn/resumed"
	TypeClientResult = "tool/client-result"

	// ParkApproval: the turn waits for approval answers (status waiting-approval).
	ParkApproval = "approval"
	// ParkClient: the turn waits for results of client-executed tools (status waiting-client).
	ParkClient = "client"
	// ParkHandover: a draining replica handed the turn over at a step boundary; it waits for
	// nothing and resumes on the next lease holder.
	ParkHandover = "handover"
)

// TurnParked is dshd's marker of a parked turn (E6), written ignorable. Step is the step the turn
// parked in: for approval and client waits the step is still open (its step/end comes after the
// resume); for a handover it is the last step that ended (0 before the first), and the next step
// is Step+1. Waits lists what the turn waits for, in model order; it is empty for a handover.
type TurnParked struct {
	Turn   int        `json:"turn"`
	Step   int        `json:"step"`
	Reason string     `json:"reason"`
	Waits  []ParkWait `json:"waits,omitempty"`
	// Concludes reports that a result committed before the park concluded the turn (RES-5): the
	// resumed step ends the turn after its tools.
	Concludes bool `json:"concludes,omitempty"`
}

// ParkWait is one thing a parked turn waits for: an approval (ApprovalID, of the call CallID) or
// the client's result of call CallID. DeadlineMs is when it is decided without an answer (epoch
// milliseconds): the approval `cancelled`, the client call TOOL_TIMEOUT (E2).
type ParkWait struct {
	Kind       string `json:"kind"`
	CallID     string `json:"callId"`
	ToolName   string `json:"toolName"`
	ApprovalID string `json:"approvalId,omitempty"`
	DeadlineMs int64  `json:"deadlineMs,omitempty"`
}

// TurnResumed is written ignorable by the loop instance that resumes a parked turn, before
// anything else it writes: from it on, the turn is running again.
type TurnResumed struct {
	Turn int `json:"turn"`
	Step int `json:"step"`
	// ParkedSeq is the seq of the turn/parked it resumes.
	ParkedSeq int64 `json:"parkedSeq"`
}

// ClientResult is the result of a client-executed tool call, appended (ignorable) by whoever
// received it: the client's POST /v1/sessions/{id}/tool-results, or the call's deadline
// (TimedOut, no content). The resumed turn turns it into the call's `tool/result` through
// post-execute and finalize. A call has at most one.
type ClientResult struct {
	CallID   string      `json:"callId"`
	Content  []llm.Block `json:"content,omitempty"`
	IsError  bool        `json:"isError,omitempty"`
	TimedOut bool        `json:"timedOut,omitempty"`
}

func (TurnParked) Type() string   { return TypeTurnParked }
func (TurnResumed) Type() string  { return TypeTurnResumed }
func (ClientResult) Type() string { return TypeClientResult }

// Validate implements Payload.
func (p TurnParked) Validate() error {
	if err := checkTurn(p.Turn); err != nil {
		return err
	}
	if p.Step < 0 {
		return errors.New("step must be an integer >= 0")
	}
	switch p.Reason {
	case ParkHandover:
		if len(p.Waits) != 0 {
			return errors.New("a handover waits for nothing")
		}
	case ParkApproval, ParkClient:
		if p.Step < 1 {
			return errors.New("step must be an integer >= 1")
		}
		if len(p.Waits) == 0 {
			return errors.New("waits must name what the turn waits for")
		}
	default:
		return fmt.Errorf("reason must be %q, %q or %q", ParkApproval, ParkClient, ParkHandover)
	}
	for _, w := range p.Waits {
		if w.CallID == "" {
			return errors.New("every wait must name its callId")
		}
		switch w.Kind {
		case ParkApproval:
			if w.ApprovalID == "" {
				return errors.New("an approval wait must name its approvalId")
			}
		case ParkClient:
		default:
			return fmt.Errorf("wait kind must be %q or %q", ParkApproval, ParkClient)
		}
	}
	return nil
}

// Validate implements Payload.
func (p TurnResumed) Validate() error {
	if err := checkTurn(p.Turn); err != nil {
		return err
	}
	if p.Step < 0 || p.ParkedSeq < 0 {
		return errors.New("step and parkedSeq must be integers >= 0")
	}
	return nil
}

// Validate implements Payload.
func (p ClientResult) Validate() error {
	if p.CallID == "" {
		return errors.New("callId must be a non-empty string")
	}
	if p.TimedOut && len(p.Content) > 0 {
		return errors.New("a timed-out result has no content")
	}
	return nil
}

// Park is the state of a parked turn, read from a log.
type Park struct {
	TurnParked
	// Seq is the seq of the turn/parked event.
	Seq int64
	// Decided holds the approval/decided of each approval wait answered since (by approval id).
	Decided map[string]ApprovalDecided
	// Results holds the tool/client-result of each client wait answered since (by call id).
	Results map[string]ClientResult
	// Cancel is the first agent/cancel since the parking loop instance began, if any.
	Cancel *AgentCancel
}

// Resolvable reports whether the parked turn can resume now: it was handed over, every wait was
// answered, or it was cancelled.
func (p Park) Resolvable() bool {
	if p.Cancel != nil || p.Reason == ParkHandover {
		return true
	}
	for _, w := range p.Waits {
		if !p.answered(w) {
			return false
		}
	}
	return true
}

// Open returns the waits not answered yet, in order.
func (p Park) Open() []ParkWait {
	var out []ParkWait
	for _, w := range p.Waits {
		if !p.answered(w) {
			out = append(out, w)
		}
	}
	return out
}

func (p Park) answered(w ParkWait) bool {
	switch w.Kind {
	case ParkApproval:
		_, ok := p.Decided[w.ApprovalID]
		return ok
	case ParkClient:
		_, ok := p.Results[w.CallID]
		return ok
	}
	return false
}

// Parked returns the park of the turn left open at the end of events, when that turn is parked:
// its last turn/parked has no turn/resumed after it. Decided, Results and Cancel hold what was
// appended since the parking loop instance began (a cancel it did not see before it parked
// cancels the park). events may be any suffix of a log that
// starts at or before the open turn's turn/start.
func Parked(events []Event) (Park, bool) {
	at := -1
	for i := len(events) - 1; i >= 0; i-- {
		t := events[i].Type
		if t == TypeTurnEnd || t == TypeTurnStart || t == TypeTurnResumed {
			return Park{}, false
		}
		if t == TypeTurnParked {
			at = i
			break
		}
	}
	if at < 0 {
		return Park{}, false
	}
	d, err := Decode[TurnParked](events[at])
	if err != nil {
		return Park{}, false
	}
	p := Park{TurnParked: d, Seq: events[at].Seq, Decided: map[string]ApprovalDecided{}, Results: map[string]ClientResult{}}
	// Answers and cancels count from the start of the loop instance that parked (its turn/start
	// or turn/resumed): one appended while the runner was writing the park, before turn/parked
	// was committed, was not seen by it and answers the park too.
	from := 0
	for i := at - 1; i >= 0; i-- {
		if t := events[i].Type; t == TypeTurnStart || t == TypeTurnResumed {
			from = i + 1
			break
		}
	}
	for i, ev := range events[from:] {
		if from+i == at {
			continue
		}
		switch ev.Type {
		case TypeApprovalDecided:
			if d, err := Decode[ApprovalDecided](ev); err == nil {
				if _, dup := p.Decided[d.ID]; !dup {
					p.Decided[d.ID] = d
				}
			}
		case TypeClientResult:
			if r, err := Decode[ClientResult](ev); err == nil {
				if _, dup := p.Results[r.CallID]; !dup {
					p.Results[r.CallID] = r
				}
			}
		case TypeAgentCancel:
			if c, err := Decode[AgentCancel](ev); err == nil && p.Cancel == nil {
				p.Cancel = &c
			}
		}
	}
	return p, true
}

// ClientResultOf returns the first tool/client-result of callID among evs.
func ClientResultOf(evs []Event, callID string) (ClientResult, bool) {
	for _, ev := range evs {
		if ev.Type != TypeClientResult {
			continue
		}
		if r, err := Decode[ClientResult](ev); err == nil && r.CallID == callID {
			return r, true
		}
	}
	return ClientResult{}, false
}
