package agentloop

import (
	"context"
	"errors"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/promptasm"
	"github.com/dshd/dshd/pkg/telemetry"
)

// RunTurn runs one turn (LOOP-2) and returns how it ended. Cancelling ctx aborts the turn; a
// *CancelError cause names why. The error is non-nil only when the log itself could not be
// written: the turn is then left open for crash repair.
func (r *Runner) RunTurn(ctx context.Context) (Reason, error) { return r.runTurn(ctx, nil) }

// ResumeTurn resumes the parked turn p (extension E6) as a new loop instance: `turn/resumed`
// first, then the parked step's calls from where they waited (or, for a handover, the next
// step), then the turn's further steps as RunTurn runs them. A park followed by an agent/cancel
// ends aborted, its waiting calls given their cancellation results. Like RunTurn it may park
// again (Reason.Kind EndParked).
func (r *Runner) ResumeTurn(ctx context.Context, p eventlog.Park) (Reason, error) {
	return r.runTurn(ctx, &p)
}

// runTurn runs a new turn, or resumes the parked turn p.
func (r *Runner) runTurn(ctx context.Context, p *eventlog.Park) (Reason, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.intr.set(cancel)
	defer r.intr.set(nil)
	r.m.onCancel = func(d eventlog.AgentCancel) { cancel(&CancelError{Cause: d.Reason}) }
	defer func() { r.m.onCancel = nil }()
	turn := r.m.lastTurn + 1
	r.claimLost = false
	r.steps = 0
	if p != nil {
		turn, r.steps = p.Turn, p.Step
		// A new loop instance: its first request logs request/header with reason resume
		// (LOOP-3), whichever replica (or cached runner) resumes the turn.
		r.headerLogged = false
		if p.Cancel != nil {
			cancel(&CancelError{Cause: p.Cancel.Reason})
		}
		r.cfg.Metrics.TurnResumed()
	}
	started := time.Now()
	ctx, span := r.startRoot(ctx, telemetry.OperationInvokeAgent, int64(turn))
	var first *handle
	if p == nil {
		first = r.w.stage(staged{typ: eventlog.TypeTurnStart, data: eventlog.TurnStart{Turn: turn}})
	} else {
		first = r.w.stage(staged{typ: eventlog.TypeTurnResumed, ignorable: true,
			data: eventlog.TurnResumed{Turn: turn, Step: p.Step, ParkedSeq: p.Seq}})
	}
	if telemetry.Sampled(span) {
		r.w.stage(staged{typ: eventlog.TypeTurnTrace, ignorable: true,
			data: eventlog.TurnTrace{Turn: turn, TraceID: span.SpanContext().TraceID().String()}})
	}
	if p != nil {
		// turn/resumed is durable before any call goes on: a cancel appended after the park was
		// read is folded now (and cancels the turn), and one appended later counts for a park
		// this loop instance writes (eventlog.Parked reads cancels from its turn/resumed on).
		if err := r.w.flush(context.WithoutCancel(ctx)); err != nil {
			endSpan(span, first, nil, err)
			return Reason{}, r.logErr(err)
		}
	}
	end, err := r.turnSteps(ctx, turn, p)
	if errors.Is(err, errLog) {
		endSpan(span, first, nil, err)
		return Reason{}, err
	}
	if errors.Is(err, errParked) {
		ferr := r.w.flush(context.WithoutCancel(ctx))
		endSpan(span, first, nil, ferr)
		if ferr != nil {
			return Reason{}, r.logErr(ferr)
		}
		r.cfg.Metrics.TurnParked(r.parkReason)
		r.cfg.Logger.InfoContext(ctx, "turn parked", "session", r.cfg.SessionID, "turn", turn, "reason", r.parkReason, "steps", r.steps)
		return Reason{Kind: EndParked}, nil
	}
	// A cancel that cleared the inbox before the turn's first batch was written aborts the turn,
	// whatever it did meanwhile: its reason is decided when turn/end is written.
	lost := Reason{Kind: eventlog.EndAborted, Reason: &Cause{Kind: eventlog.CauseUser}}
	last := r.w.stage(staged{typ: eventlog.TypeTurnEnd, dataFn: func(*eventlog.Head) (any, error) {
		if r.claimLost {
			return eventlog.TurnEnd{Turn: turn, Reason: lost}, nil
		}
		return eventlog.TurnEnd{Turn: turn, Reason: end}, nil
	}})
	if err := r.w.flush(context.WithoutCancel(ctx)); err != nil {
		endSpan(span, first, last, err)
		return Reason{}, r.logErr(err)
	}
	if r.claimLost {
		end = lost
	}
	r.turnEnded(span, end, started)
	r.cfg.Logger.InfoContext(ctx, "turn ended", "session", r.cfg.SessionID, "turn", turn, "reason", end.Kind,
		"steps", r.steps, "duration_ms", time.Since(started).Milliseconds())
	endSpan(span, first, last, nil)
	return end, nil
}

// turnEnded records a written turn ending in the metrics and on the turn's span.
func (r *Runner) turnEnded(span trace.Span, end Reason, started time.Time) {
	code := ""
	if end.Kind == eventlog.EndError {
		code = CodeUnknown
		if end.Error != nil && end.Error.Code != "" {
			code = end.Error.Code
		}
	}
	r.cfg.Metrics.TurnEnded(end.Kind, code, time.Since(started), r.steps)
	if span.IsRecording() {
		span.SetAttributes(telemetry.AttrEndReason.String(end.Kind))
		if code != "" {
			span.SetAttributes(telemetry.AttrErrorType.String(code))
			span.SetStatus(codes.Error, code)
		}
	}
}

// turnSteps runs the steps of turn and returns its ending.
func (r *Runner) turnSteps(ctx context.Context, turn int, p *eventlog.Park) (Reason, error) {
	var ends *Reason
	step := 0
	if p != nil {
		step = p.Step
		if p.Reason != eventlog.ParkHandover {
			e, err := r.resumeStep(ctx, turn, step, *p)
			switch {
			case errors.Is(err, errLog), errors.Is(err, errParked):
				return Reason{}, err
			case err != nil && ctx.Err() != nil:
				return aborted(ctx), nil
			case err != nil:
				return failure(err), nil
			}
			ends = e
		}
	}
	for {
		if ctx.Err() != nil {
			return aborted(ctx), nil
		}
		if err := r.w.catchUp(ctx); err != nil {
			return Reason{}, r.logErr(err)
		}
		if ends != nil && len(r.waiting(eventlog.InboxNextStep)) == 0 {
			return *ends, nil
		}
		if r.handingOver() {
			// A step boundary of a draining replica: another step follows, on the next holder
			// (which claims what waits for it).
			return Reason{}, r.handoverStep(turn, step)
		}
		if step == 0 && r.cfg.Admit != nil {
			if refused := r.cfg.Admit(ctx); refused != nil {
				if err := r.discardInput(ctx); err != nil {
					return Reason{}, r.logErr(err)
				}
				return Reason{Kind: eventlog.EndError, Error: refused}, nil
			}
		}
		// The step limit and the prompt are checked before anything is claimed, so that a turn
		// that cannot take another step leaves its input in the inbox.
		if step == r.cfg.MaxSteps {
			return errorReason(CodeMaxSteps, errMaxSteps(r.cfg.MaxSteps)), nil
		}
		asm, err := r.assemble(ctx)
		if err != nil {
			// PRM-8: the turn ends with the error and no step. At the turn's boundary it consumes
			// the input it was woken for, as the reference does, so the same failing turn is not
			// opened again and again for it.
			if step == 0 {
				if err := r.discardInput(ctx); err != nil {
					return Reason{}, r.logErr(err)
				}
			}
			return errorReason(CodePrompt, err), nil
		}
		kept := r.m.snap.Kept()
		var snap *llm.Message
		if m, ok := r.m.snap.Next(r.newID(), asm.RuntimeContext); ok {
			snap = &m
		}
		entry, err := r.enterStep(ctx, turn, step+1, step == 0, step == 0 || ends != nil, snap)
		if err != nil {
			return Reason{}, r.logErr(err)
		}
		if !entry.started {
			r.m.snap.Keep(kept) // the snapshot was not written: the model does not have it
			if ctx.Err() != nil {
				return aborted(ctx), nil // a cancel cleared the input as the step was opening
			}
			if ends != nil {
				return *ends, nil
			}
			return Reason{Kind: eventlog.EndCompleted}, nil
		}
		step++
		r.steps = step
		if ctx.Err() != nil {
			return aborted(ctx), nil // a cancel folded as the step opened: no model request
		}
		stepEnd, err := r.runStep(ctx, turn, step, asm)
		if err != nil {
			if errors.Is(err, errLog) || errors.Is(err, errParked) {
				return Reason{}, err
			}
			if ctx.Err() != nil {
				return aborted(ctx), nil
			}
			return failure(err), nil
		}
		if ends == nil || ends.Kind != eventlog.EndMaxTokens {
			ends = stepEnd
		}
	}
}

// runStep runs the model call and the tools of a step that enterStep opened, and always writes
// step/end. It returns the step's ending (nil: another step follows).
func (r *Runner) runStep(ctx context.Context, turn, step int, asm promptasm.Result) (end *Reason, err error) {
	ctx, span := telemetry.StartChild(ctx, "dshd.step", trace.SpanKindInternal)
	if span.IsRecording() {
		span.SetAttributes(telemetry.AttrSession.String(r.cfg.SessionID), telemetry.AttrTurn.Int(turn), telemetry.AttrStep.Int(step))
	}
	parked := false // a parked step stays open: its step/end is written when it is resumed
	defer func() {
		if !parked {
			r.w.stage(staged{typ: eventlog.TypeStepEnd, data: eventlog.StepEnd{Turn: turn, Step: step}})
		}
		if span.IsRecording() {
			if err != nil && !errors.Is(err, errParked) {
				span.SetStatus(codes.Error, failureOf(err).Code)
			}
			span.End()
		}
	}()
	msg, finish, err := r.callModel(ctx, turn, step, asm)
	if err != nil {
		return nil, err
	}
	if finish == llm.FinishMaxTokens {
		return &Reason{Kind: eventlog.EndMaxTokens}, nil
	}
	calls := msg.ToolCalls()
	if len(calls) == 0 {
		return &Reason{Kind: eventlog.EndCompleted}, nil
	}
	out, err := r.runTools(ctx, turn, step, calls)
	if err == nil && len(out.Parked) > 0 {
		if ctx.Err() == nil {
			err := r.parkStep(turn, step, out)
			parked = errors.Is(err, errParked)
			return nil, err
		}
		out, err = r.cancelParked(ctx, turn, step, out)
	}
	if err != nil {
		return nil, err
	}
	if out.ConcludesTurn {
		return &Reason{Kind: eventlog.EndCompleted}, nil
	}
	return nil, nil
}

func (r *Runner) assemble(ctx context.Context) (promptasm.Result, error) {
	in := r.cfg.PromptInput
	in.Provider, in.Model = r.cfg.Model.Provider, r.cfg.Model.Model
	return r.cfg.Prompt.Assemble(ctx, in)
}

func aborted(ctx context.Context) Reason {
	cause := Cause{Kind: eventlog.CauseUser}
	var ce *CancelError
	if errors.As(context.Cause(ctx), &ce) {
		cause = ce.Cause
	}
	return Reason{Kind: eventlog.EndAborted, Reason: &cause}
}

func errorReason(code string, err error) Reason {
	return Reason{Kind: eventlog.EndError, Error: &eventlog.TurnError{Message: err.Error(), Code: code}}
}

// failure turns a step failure into a turn ending with the facts of failureOf.
func failure(err error) Reason {
	f := failureOf(err)
	return Reason{Kind: eventlog.EndError, Error: &eventlog.TurnError{Message: f.Message, Code: f.Code, Status: f.Status}}
}

// failureOf returns the facts of a step failure: an LLM error keeps its message, code and
// status, anything else is UNKNOWN with the error's text.
func failureOf(err error) llm.Failure {
	var le *llm.Error
	if errors.As(err, &le) {
		return le.Failure()
	}
	return llm.Failure{Message: err.Error(), Code: CodeUnknown}
}

type errMaxSteps int

func (e errMaxSteps) Error() string {
	return "the turn reached its step limit (maxSteps " + strconv.Itoa(int(e)) + ")"
}
