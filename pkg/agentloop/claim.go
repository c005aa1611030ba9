package agentloop

import (
	"context"
	"slices"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

// stageInsertion stages the insertion of msgs at the end of target. The position is taken from
// the inbox lengths under the append lock, so it is right whatever other writers did meanwhile.
func (w *writer) stageInsertion(target string, msgs []llm.Message) *handle {
	return w.stage(staged{typ: eventlog.TypeInboxSpliced, dataFn: func(l *eventlog.Head) (any, error) {
		return eventlog.Insertion(target, l.Inbox.Len(target), msgs...), nil
	}})
}

// stepEntry is what enterStep decided, filled in when its batch is built.
type stepEntry struct {
	started bool
	entered []llm.Message
	claimed int
}

// enterStep opens step of turn with its input (LOOP-2): it claims every next-step message, then
// one next-turn message at a turn boundary, and writes the claim, `step/start` and one
// `user/message` per entered message (the claimed ones, then snap when not nil) in one batch,
// committed at once: a crash can never leave a message claimed but not entered.
//
// The batch is built on an up-to-date view of the log (under the append lock), so what it claims
// is exactly what the inbox holds then. When there is nothing to enter and the step needs input
// (the first step, or a turn that is ending), it writes nothing and reports no step.
func (r *Runner) enterStep(ctx context.Context, turn, step int, boundary, needInput bool, snap *llm.Message) (stepEntry, error) {
	planned := len(r.m.inbox.NextStep)
	if boundary {
		planned += min(1, len(r.m.inbox.NextTurn))
	}
	if planned == 0 && snap == nil {
		if needInput {
			return stepEntry{}, nil
		}
		// No new input: the step starts without a claim, and nothing needs writing yet.
		r.w.stage(staged{typ: eventlog.TypeStepStart, data: eventlog.StepStart{Turn: turn, Step: step}})
		return stepEntry{started: true}, nil
	}
	var e stepEntry
	r.w.stage(staged{fresh: true, expand: func(l *eventlog.Head) ([]eventlog.NewEvent, error) {
		e = stepEntry{}
		var out []eventlog.NewEvent
		claim := func(target string, max int) {
			list := r.m.inbox.List(target)
			k := len(list)
			if max > 0 {
				k = min(k, max)
			}
			if k == 0 {
				return
			}
			e.entered = append(e.entered, slices.Clone(list[:k])...)
			e.claimed += k
			out = append(out, eventlog.NewEvent{Type: eventlog.TypeInboxSpliced, Data: eventlog.Deletion(target, k, "")})
		}
		claim(eventlog.InboxNextStep, 0)
		if boundary {
			claim(eventlog.InboxNextTurn, 1)
		}
		if snap != nil {
			e.entered = append(e.entered, *snap)
		}
		if len(e.entered) == 0 && needInput {
			return nil, nil
		}
		e.started = true
		out = append(out, eventlog.NewEvent{Type: eventlog.TypeStepStart, Data: eventlog.StepStart{Turn: turn, Step: step}})
		for _, m := range e.entered {
			out = append(out, eventlog.NewEvent{Type: eventlog.TypeUserMessage, Data: eventlog.UserMessage{Message: m}, SurfaceOp: eventlog.Append})
		}
		return out, nil
	}})
	if err := r.w.flush(ctx); err != nil {
		return stepEntry{}, err
	}
	r.claimed += e.claimed
	return e, nil
}

// discardInput claims a turn boundary's input (every next-step message and one next-turn message)
// without entering it, for a turn that cannot take a step.
func (r *Runner) discardInput(ctx context.Context) error {
	claimed := 0
	r.w.stage(staged{fresh: true, expand: func(l *eventlog.Head) ([]eventlog.NewEvent, error) {
		claimed = 0
		var out []eventlog.NewEvent
		for _, c := range []struct {
			target string
			max    int
		}{{eventlog.InboxNextStep, 0}, {eventlog.InboxNextTurn, 1}} {
			k := len(r.m.inbox.List(c.target))
			if c.max > 0 {
				k = min(k, c.max)
			}
			if k > 0 {
				claimed += k
				out = append(out, eventlog.NewEvent{Type: eventlog.TypeInboxSpliced, Data: eventlog.Deletion(c.target, k, "")})
			}
		}
		return out, nil
	}})
	if err := r.w.flush(ctx); err != nil {
		return err
	}
	r.claimed += claimed
	return nil
}
