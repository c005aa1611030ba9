package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/dshd/dshd/pkg/registry"
)

// The pre-execute webhook is asked once per SCHED-2 group (extension E5, docs/rules.md): the
// scheduler tells the set when a group begins (GroupFunc, wired as scheduler.Config.GroupFunc),
// the first prepare of the group that reaches the webhook sends one BatchRequest carrying every
// call of the group that no pre-execute rule decides, in model order, and each call's prepare
// takes its decision from the answer when it comes up. The prepares, their decisions and their
// log events keep the SCHED-3 order; only the requests change. A call the answer does not
// cover, or a request that fails or times out, is decided as the webhook's failure policy says:
// fail closed, the call is denied with a reason that says what failed.
//
// A call that is prepared outside a group (the registry's Execute, a run_code sub-call) is a
// batch of one: the wire format is the same.

// EventPreExecuteBatch is the X-Dshd-Event header and the event field of a BatchRequest.
const EventPreExecuteBatch = "preExecuteBatch"

// BatchRequest is the body of a pre-execute webhook request: the calls of one SCHED-2 group
// that no pre-execute rule decides, in model order.
type BatchRequest struct {
	Event         string      `json:"event"` // "preExecuteBatch"
	PresetID      string      `json:"presetId"`
	PresetVersion int         `json:"presetVersion"`
	SessionID     string      `json:"sessionId"` // the calling agent; empty outside a session
	Turn          int         `json:"turn"`
	Step          int         `json:"step"`
	Calls         []BatchCall `json:"calls"`
}

// BatchCall is one call of a BatchRequest.
type BatchCall struct {
	CallID    string          `json:"callId"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

// BatchAnswer is the pre-execute webhook's answer: one decision per call, matched by callId
// (their order does not matter). A call without a decision is decided as a failed request is.
type BatchAnswer struct {
	Decisions []BatchDecision `json:"decisions"`
}

// BatchDecision is the decision on one call: allow, deny (with an optional reason) or ask (the
// call asks for approval, with the optional reason).
type BatchDecision struct {
	CallID string `json:"callId"`
	PreAnswer
}

// groupKey is the context key under which a group's batch travels to its prepares.
type groupKey struct{}

// GroupFunc returns the scheduler's group hook for the set under env (scheduler.Config.GroupFunc):
// it prepares one batch of the group's calls that no pre-execute rule decides, sent when the
// first of them reaches the webhook. It returns nil when the set names no pre-execute webhook.
func (s *Set) GroupFunc(env Env) func(ctx context.Context, calls []registry.Input) func(context.Context) context.Context {
	if s.preURL == "" {
		return nil
	}
	if env.Logger == nil {
		env.Logger = slog.New(slog.DiscardHandler)
	}
	return func(_ context.Context, calls []registry.Input) func(context.Context) context.Context {
		var undecided []registry.Input
		for _, in := range calls {
			if in.Parent != nil || !json.Valid(in.Args) {
				continue // not a top-level call, or one whose prepare ends before pre-execute (PIPE-2)
			}
			args := argsView{raw: in.Args}
			if _, ok := s.ruleDecision(in.Name, &args); !ok {
				undecided = append(undecided, in)
			}
		}
		if len(undecided) == 0 {
			return nil
		}
		b := newBatch(s, env, undecided)
		return func(ctx context.Context) context.Context { return context.WithValue(ctx, groupKey{}, b) }
	}
}

// batch is the one webhook request of a group and, once it is answered, its decisions. Its
// methods are safe for concurrent use (the scheduler calls them from its lane only).
type batch struct {
	s     *Set
	env   Env
	req   BatchRequest
	calls map[string]bool // callIds of req

	mu      sync.Mutex
	sent    bool
	err     error                // the request's failure
	answers map[string]PreAnswer // by callId, the first decision of each
}

func newBatch(s *Set, env Env, ins []registry.Input) *batch {
	b := &batch{s: s, env: env, calls: map[string]bool{}}
	b.req = BatchRequest{Event: EventPreExecuteBatch, PresetID: env.PresetID, PresetVersion: env.PresetVersion,
		SessionID: ins[0].Agent, Turn: ins[0].Location.Turn, Step: ins[0].Location.Step, Calls: make([]BatchCall, 0, len(ins))}
	for _, in := range ins {
		args := in.Args
		if len(args) == 0 {
			args = json.RawMessage("null")
		}
		b.req.Calls = append(b.req.Calls, BatchCall{CallID: in.CallID, Tool: in.Name, Arguments: args})
		b.calls[in.CallID] = true
	}
	return b
}

// batchFor returns the batch of e's group when it carries e, else a new batch of e alone.
func (s *Set) batchFor(ctx context.Context, e *registry.Execution, env Env) *batch {
	if b, ok := ctx.Value(groupKey{}).(*batch); ok && b.s == s && e.Parent == nil && b.calls[e.CallID] &&
		b.req.SessionID == e.Agent && b.req.Turn == e.Location.Turn && b.req.Step == e.Location.Step {
		return b
	}
	return newBatch(s, env, []registry.Input{{CallID: e.CallID, Name: e.Name, Args: e.Args, Agent: e.Agent, Location: e.Location}})
}

// answer returns the webhook's answer on callID, sending the batch's request first when it has
// not been sent (or was cancelled). The error is the request's failure or the answer's gap.
func (b *batch) answer(ctx context.Context, callID string) (PreAnswer, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.sent || errors.Is(b.err, context.Canceled) {
		b.sent, b.err = true, b.send(ctx)
	}
	if b.err != nil {
		return PreAnswer{}, b.err
	}
	a, ok := b.answers[callID]
	if !ok {
		b.env.Logger.WarnContext(ctx, "policy: the pre-execute webhook's answer has no decision for a call", "preset", b.env.PresetID,
			"version", b.env.PresetVersion, "callId", callID)
		return PreAnswer{}, fmt.Errorf("the webhook's answer has no decision for call %q (a %q request is answered with {\"decisions\": [{\"callId\", \"decision\", \"reason\"}, ...]})",
			echo(callID), EventPreExecuteBatch)
	}
	return a, nil
}

// send makes the request. Its failure is logged once for the whole batch.
func (b *batch) send(ctx context.Context) error {
	env := b.env
	if env.Client == nil {
		return errDisabled
	}
	var ans BatchAnswer
	limit := int64(MaxAnswerBytes) * int64(len(b.req.Calls))
	if err := env.Client.call(ctx, b.s.preURL, env.Secret, b.s.timeout, EventPreExecuteBatch, b.req, &ans, limit); err != nil {
		if ctx.Err() == nil {
			env.Logger.WarnContext(ctx, "policy: pre-execute webhook failed", "preset", env.PresetID,
				"version", env.PresetVersion, "calls", len(b.req.Calls), "err", err)
		}
		return err
	}
	b.answers = make(map[string]PreAnswer, len(ans.Decisions))
	for _, d := range ans.Decisions {
		if _, dup := b.answers[d.CallID]; !dup && b.calls[d.CallID] {
			b.answers[d.CallID] = d.PreAnswer
		}
	}
	return nil
}
