package agentloop

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dshd/dshd/pkg/approval"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/scheduler"
)

// ParkConfig lets a runner's turns park (extension E6, docs/rules.md): a call whose ask waits
// for a person, or a client-executed call, commits what it can and the turn parks instead of
// holding the runner; the answer resumes it as a new loop instance.
type ParkConfig struct {
	// ApprovalTimeout is how long a parked ask waits for its answer: its wait's DeadlineMs is
	// the park's time plus this (the preset default, preset.DefaultApprovalTimeoutMs, when zero).
	ApprovalTimeout time.Duration
}

// EndParked is the Reason.Kind RunTurn and Serve report for a turn that parked: it is not a turn
// ending (no turn/end is written) and never appears in the log.
const EndParked = "parked"

// errParked ends a step (and its turn's run) that parked: turn/parked is staged, step/end and
// turn/end are not.
var errParked = errors.New("agentloop: the turn parked")

// Handover asks the runner to hand its turn over (a draining replica, E6): at the running
// turn's next step boundary it commits turn/parked with reason handover and Serve returns, and
// Serve opens no new turn; the lease's next holder resumes the turn as a new loop instance. Safe
// to call from any goroutine; it stays in force for the runner's life.
func (r *Runner) Handover() { r.handover.Store(true) }

// handingOver reports whether Handover was called.
func (r *Runner) handingOver() bool { return r.handover.Load() }

// Finish asks the runner to open and resume no further turn: Serve returns once the running turn
// ends (a draining replica lets its running turns finish; what waits goes to another replica).
// Safe to call from any goroutine; it stays in force for the runner's life.
func (r *Runner) Finish() { r.finish.Store(true) }

// handoverStep stages the turn/parked of a handover after step (0: before the first) of turn and
// returns errParked.
func (r *Runner) handoverStep(turn, step int) error {
	r.w.stage(staged{typ: eventlog.TypeTurnParked, ignorable: true,
		data: eventlog.TurnParked{Turn: turn, Step: step, Reason: eventlog.ParkHandover}})
	r.parkReason = eventlog.ParkHandover
	return errParked
}

// Parked returns the park of the session's turn when the runner's view of the log ends with a
// parked turn (eventlog.Parked), with what was answered since.
func (r *Runner) Parked() (eventlog.Park, bool) {
	if _, open := r.m.log.OpenTurn(); !open {
		return eventlog.Park{}, false
	}
	return eventlog.Parked(r.m.log.From(r.m.turnSeq))
}

// parkStep stages the turn/parked of a step whose tools parked (out.Parked) and returns
// errParked. Each wait gets its deadline: an ask's from the park's approval timeout, a client
// call's from its tool's timeout.
func (r *Runner) parkStep(turn, step int, out scheduler.Outcome) error {
	now := r.now()
	timeout := r.cfg.Park.ApprovalTimeout
	if timeout <= 0 {
		timeout = time.Duration(preset.DefaultApprovalTimeoutMs) * time.Millisecond
	}
	d := eventlog.TurnParked{Turn: turn, Step: step, Reason: eventlog.ParkClient, Concludes: out.ConcludesTurn}
	turnEvs := r.m.log.From(r.m.turnSeq)
	for _, pc := range out.Parked {
		w := eventlog.ParkWait{Kind: pc.Kind, CallID: pc.Call.ID, ToolName: pc.Call.Name}
		switch pc.Kind {
		case eventlog.ParkApproval:
			d.Reason = eventlog.ParkApproval
			a, ok := approval.AskOf(turnEvs, pc.Call.ID)
			if !ok {
				return fmt.Errorf("agentloop: call %s parked on an ask that is not in the log", pc.Call.ID)
			}
			w.ApprovalID = a.ID
			w.DeadlineMs = now.Add(timeout).UnixMilli()
		case eventlog.ParkClient:
			if pc.TimeoutMs > 0 {
				w.DeadlineMs = now.Add(time.Duration(pc.TimeoutMs) * time.Millisecond).UnixMilli()
			}
		}
		d.Waits = append(d.Waits, w)
	}
	r.w.stage(staged{typ: eventlog.TypeTurnParked, data: d, ignorable: true})
	r.parkReason = d.Reason
	return errParked
}

// resumeCalls rebuilds the calls of step of turn from the log for its resumption: the tool calls
// of the step's assistant message, each with what the log holds of it (scheduler.Resume). waits
// are the park's (nil for a step whose park was cancelled before it was written); results the
// client results answered; cancelled says the turn is cancelled, so a waiting client call
// without a result ends ABORTED.
func (r *Runner) resumeCalls(turn, step int, waits []eventlog.ParkWait, results map[string]eventlog.ClientResult, cancelled bool) ([]scheduler.Call, bool, error) {
	evs := r.m.log.From(r.m.turnSeq)
	var msg *llm.Message
	callSeq := map[string]int64{}
	done := map[string]bool{}
	asks := map[string]eventlog.ApprovalAsked{}
	for _, ev := range evs {
		switch ev.Type {
		case eventlog.TypeAssistantMessage:
			if d, err := eventlog.Decode[eventlog.AssistantMessage](ev); err == nil && d.Turn == turn && d.Step == step {
				m := d.Message
				msg = &m
			}
		case eventlog.TypeToolCall:
			if d, err := eventlog.Decode[eventlog.ToolCall](ev); err == nil && d.Turn == turn && d.Step == step {
				callSeq[d.CallID] = ev.Seq
			}
		case eventlog.TypeToolResult:
			if d, err := eventlog.Decode[eventlog.ToolResult](ev); err == nil && d.Turn == turn && d.Step == step {
				for _, b := range d.Message.Content {
					if b.Type == llm.BlockToolResult {
						done[b.ToolCallID] = true
					}
				}
			}
		case eventlog.TypeApprovalAsked:
			if a, err := eventlog.Decode[eventlog.ApprovalAsked](ev); err == nil {
				asks[a.CallID] = a
			}
		}
	}
	if msg == nil {
		return nil, false, fmt.Errorf("agentloop: the parked step %d of turn %d has no assistant message in the log", step, turn)
	}
	wait := map[string]string{}
	for _, w := range waits {
		wait[w.CallID] = w.Kind
	}
	var calls []scheduler.Call
	for _, b := range msg.ToolCalls() {
		c := scheduler.Call{ID: b.ID, Name: b.Name, Arguments: b.Arguments}
		res := &scheduler.Resume{CallSeq: -1}
		if seq, ok := callSeq[b.ID]; ok {
			res.CallSeq = seq
		}
		switch {
		case done[b.ID]:
			res.Committed = true
		case res.CallSeq < 0:
		case wait[b.ID] == eventlog.ParkApproval:
			if a, ok := asks[b.ID]; ok {
				res.Input = &registry.Resumed{Ask: &registry.ResumedAsk{Reason: a.Reason}}
			}
		case wait[b.ID] == eventlog.ParkClient:
			if cr, ok := results[b.ID]; ok {
				res.Input = &registry.Resumed{Client: &cr}
			} else if cancelled {
				res.Input = &registry.Resumed{Aborted: true}
			}
		}
		c.Resume = res
		calls = append(calls, c)
	}
	return calls, len(calls) > 0, nil
}

// resumeStep finishes step of turn, whose tools parked: the calls the log holds no result of run
// again from where they were (resumeCalls), step/end is staged, and the step's ending is
// returned (nil: another step follows). errParked when it parks again.
func (r *Runner) resumeStep(ctx context.Context, turn, step int, p eventlog.Park) (end *Reason, err error) {
	defer func() {
		// The step ends here unless it parked again or the log failed (as runStep's always does).
		if !errors.Is(err, errParked) && !errors.Is(err, errLog) {
			r.w.stage(staged{typ: eventlog.TypeStepEnd, data: eventlog.StepEnd{Turn: turn, Step: step}})
		}
	}()
	calls, ok, err := r.resumeCalls(turn, step, p.Waits, p.Results, p.Cancel != nil)
	if err != nil {
		return nil, err
	}
	concluded := p.Concludes
	if ok {
		out, err := r.runCalls(ctx, turn, step, calls)
		if err == nil && len(out.Parked) > 0 {
			out.ConcludesTurn = out.ConcludesTurn || concluded
			if ctx.Err() == nil {
				return nil, r.parkStep(turn, step, out)
			}
			out, err = r.cancelParked(ctx, turn, step, out) // cancelled as it was about to park again
		}
		if err != nil {
			return nil, err
		}
		concluded = concluded || out.ConcludesTurn
	}
	if concluded {
		return &Reason{Kind: eventlog.EndCompleted}, nil
	}
	return nil, nil
}

// cancelParked runs the calls of a step that was about to park when its turn was cancelled (the
// cancel was folded while the step's calls were being prepared): they get their cancellation
// results at once instead of a park no answer would end.
func (r *Runner) cancelParked(ctx context.Context, turn, step int, out scheduler.Outcome) (scheduler.Outcome, error) {
	// The waiting calls' tool/call events may still be staged: resumeCalls reads the log.
	if err := r.w.flush(context.WithoutCancel(ctx)); err != nil {
		return out, r.logErr(err)
	}
	waits := make([]eventlog.ParkWait, len(out.Parked))
	for i, pc := range out.Parked {
		waits[i] = eventlog.ParkWait{Kind: pc.Kind, CallID: pc.Call.ID}
	}
	calls, _, err := r.resumeCalls(turn, step, waits, nil, true)
	if err != nil {
		return out, err
	}
	again, err := r.runCalls(ctx, turn, step, calls)
	again.ConcludesTurn = again.ConcludesTurn || out.ConcludesTurn
	if err == nil && len(again.Parked) > 0 {
		err = fmt.Errorf("agentloop: step %d of turn %d parked again after its turn was cancelled", step, turn)
	}
	return again, err
}
