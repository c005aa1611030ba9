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
// one next-turn message at a turn boundary, and stages the claim, `step/start` and one
// `user/message` per entered message (the claimed ones, then snap when not nil) as one entry of
// the writer: a crash can never leave a message claimed but not entered.
//
// What is entered is decided now, from the runner's view of the inbox. The entry is built on an
// up-to-date view of the log (under the append lock): it claims a list's first messages only
// while the list still starts with exactly them. Other writers only add at the ends of the
// lists, except a cancel, which clears them. The entry is committed at once, with whatever is
// pending (turn/start, the last step's results), before the model request is built: when a
// cancel removed the messages first, the entry writes nothing, the step does not start and the
// turn ends aborted{user} (claimLost), so a cancelled message never reaches a model request, the
// history or usage (docs/rules.md, cancel-exact). If the process dies before the commit, the
// input still waits in the inbox.
//
// When there is nothing to enter and the step needs input (the first step, or a turn that is
// ending), it stages nothing and reports no step.
func (r *Runner) enterStep(ctx context.Context, turn, step int, boundary, needInput bool, snap *llm.Message) (stepEntry, error) {
	var e stepEntry
	var plan []claimPlan
	for _, c := range []struct {
		target string
		max    int
		use    bool
	}{{eventlog.InboxNextStep, 0, true}, {eventlog.InboxNextTurn, 1, boundary}} {
		list := r.waiting(c.target)
		k := len(list)
		if c.max > 0 {
			k = min(k, c.max)
		}
		if !c.use || k == 0 {
			continue
		}
		plan = append(plan, claimPlan{target: c.target, ids: ids(list[:k])})
		if c.target == eventlog.InboxNextStep {
			r.unclaimed.NextStep += k
		} else {
			r.unclaimed.NextTurn += k
		}
		e.entered = append(e.entered, slices.Clone(list[:k])...)
		e.claimed += k
	}
	if snap != nil {
		e.entered = append(e.entered, *snap)
	}
	if len(e.entered) == 0 {
		if needInput {
			return stepEntry{}, nil
		}
		// No new input: the step starts without a claim.
		r.w.stage(staged{typ: eventlog.TypeStepStart, data: eventlog.StepStart{Turn: turn, Step: step}})
		return stepEntry{started: true}, nil
	}
	e.started = true
	entered := e.entered
	r.w.stage(staged{fresh: true, entered: entered, expand: func(l *eventlog.Head) ([]eventlog.NewEvent, error) {
		var out []eventlog.NewEvent
		r.claimLost = false
		if ctx.Err() != nil {
			// A cancel was folded since the turn started (keepInbox leaves the inbox as it was):
			// the claim writes nothing and the kept messages stay for the next turn.
			r.claimLost = true
			return nil, nil
		}
		fresh := make([]llm.Message, 0, len(entered))
		for _, p := range plan {
			list := r.m.inbox.List(p.target)
			if len(list) < len(p.ids) || !slices.Equal(ids(list[:len(p.ids)]), p.ids) {
				// Cleared by a cancel meanwhile: nothing of the step is written, the model is
				// not called, and the turn ends aborted (docs/rules.md, cancel-exact).
				r.claimLost = true
				return nil, nil
			}
			out = append(out, eventlog.Of(eventlog.Deletion(p.target, len(p.ids), "")))
			// The fresh mirror's messages, not the plan's: a notice replaced in place keeps its id.
			fresh = append(fresh, list[:len(p.ids)]...)
		}
		if snap != nil {
			fresh = append(fresh, *snap)
		}
		copy(entered, fresh)
		out = append(out, eventlog.Of(eventlog.StepStart{Turn: turn, Step: step}))
		for _, m := range entered {
			out = append(out, eventlog.SurfaceEvent(eventlog.UserMessage{Message: m}))
		}
		return out, nil
	}})
	// The claim is committed before the model is called, so that the log, under the lease,
	// decides whether the turn or a cancel has the messages: what a cancel removed is never sent.
	if err := r.w.flush(ctx); err != nil {
		return stepEntry{}, err
	}
	if r.claimLost {
		return stepEntry{}, nil
	}
	r.claimed += e.claimed
	return e, nil
}

// claimPlan is what a step claims from one inbox list: its first messages, by id.
type claimPlan struct {
	target string
	ids    []string
}

func ids(msgs []llm.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
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

// waiting returns the messages of an inbox list that no claim has taken: the runner's view less
// the front messages a staged, not yet written claim takes (unclaimed).
func (r *Runner) waiting(target string) []llm.Message {
	list := r.m.inbox.List(target)
	return list[min(r.unclaimed.Len(target), len(list)):]
}
