package registry

import (
	"context"
	"fmt"
	"strings"

	"github.com/dshd/dshd/pkg/llm"
)

// Finalize runs the stages after dispatch (PIPE-13..19): contexts, the cancel override,
// post-execute (unless the dispatch failure was final), the override again, finalizeContent,
// mutations and the tools/result notification. ctx is the caller's signal. The returned result
// is final and shared: never modify it.
func (r *Registry) Finalize(ctx context.Context, s *Settled) *Result {
	p := s.p
	res := withContexts(s.result, p.Exec.contexts())
	if s.final {
		return r.materialize(ctx, p, res)
	}
	return r.postAndMaterialize(ctx, p, res)
}

// Finish completes a call that was not dispatched: PrepPostResult goes through post-execute,
// PrepFinalResult only through finalizeContent and tools/result. A PrepDispatch call is
// dispatched first.
func (r *Registry) Finish(ctx context.Context, p *Prepared) *Result {
	return r.Finalize(ctx, r.Dispatch(ctx, p))
}

// Execute runs the whole pipeline for one call: Prepare, Dispatch, Finalize.
func (r *Registry) Execute(ctx context.Context, in Input) *Result {
	p := r.Prepare(ctx, in)
	return r.Finalize(ctx, r.Dispatch(ctx, p))
}

func withContexts(res *Result, ctxs []llm.Message) *Result {
	if len(ctxs) == 0 {
		return res
	}
	c := *res
	c.AdditionalContexts = append(append([]llm.Message(nil), res.AdditionalContexts...), ctxs...)
	return &c
}

func (r *Registry) postAndMaterialize(ctx context.Context, p *Prepared, res *Result) *Result {
	res = cancelOverride(ctx, p, res)
	if r.Hooks.PostExecute.Len() > 0 {
		var final bool
		res, final = r.postExecute(ctx, p, res)
		if !final {
			res = cancelOverride(ctx, p, res)
		}
	}
	return r.materialize(ctx, p, res)
}

// cancelOverride replaces a success by the cancellation result when the caller's signal is
// aborted (PIPE-14, PIPE-16), keeping contexts.
func cancelOverride(ctx context.Context, p *Prepared, res *Result) *Result {
	if res.IsError || ctx.Err() == nil {
		return res
	}
	c := abortedResult()
	if !p.Exec.Started() {
		c = AbortedBeforeDispatchResult()
	}
	c.AdditionalContexts = res.AdditionalContexts
	return c
}

// postExecute runs the tools/post-execute waterfall and applies its decision (PIPE-15). final
// reports a failure that skips the second cancel override.
func (r *Registry) postExecute(ctx context.Context, p *Prepared, res *Result) (*Result, bool) {
	d, err := r.runPost(ctx, p, res)
	if err != nil {
		return keepContexts(failureOf(err), res), true
	}
	switch d.Kind {
	case PostBlock:
		return blocked(d), false
	case PostAccept:
	default:
		return keepContexts(failure(fmt.Sprintf("tools/post-execute returned an unknown decision kind %d", d.Kind), nil), res), true
	}
	switch {
	case d.Content != nil && d.Value != nil:
		return keepContexts(failure("post-execute accept cannot replace both content and value", nil), res), true
	case d.Value != nil && res.IsError:
		return keepContexts(failure("post-execute accept cannot replace the value of a failed result", nil), res), true
	}
	out := res
	if d.Value != nil {
		out = r.revalidate(p, &Result{Value: d.Value})
		out = keepContexts(out, res)
	} else if d.Content != nil {
		c := *res
		c.Content = d.Content
		out = &c
	}
	if len(d.AdditionalContexts) > 0 {
		c := *out
		c.AdditionalContexts = append(append([]llm.Message(nil), out.AdditionalContexts...), d.AdditionalContexts...)
		out = &c
	}
	return out, false
}

func (r *Registry) runPost(ctx context.Context, p *Prepared, res *Result) (d PostDecision, err error) {
	defer func() { err = r.recovered(ctx, "tools/post-execute", recover(), err) }()
	return r.Hooks.PostExecute.Run(ctx, p.Exec.Scope, &Call{Exec: p.Exec, Result: res})
}

func keepContexts(out, from *Result) *Result {
	if len(from.AdditionalContexts) == 0 {
		return out
	}
	out.AdditionalContexts = from.AdditionalContexts
	return out
}

// blocked builds the block failure (PIPE-15): content is the feedback, the message its text
// blocks joined with newlines, and only the decision's contexts are kept.
func blocked(d PostDecision) *Result {
	var parts []string
	hasText := false
	for _, b := range d.Feedback {
		if b.Type == llm.BlockText {
			parts = append(parts, b.Text)
			hasText = true
		} else {
			parts = append(parts, fmt.Sprintf("[%s content]", b.Type))
		}
	}
	msg := strings.Join(parts, "\n")
	if !hasText {
		msg = msgBlockedDefault
	}
	content := d.Feedback
	if content == nil {
		content = []llm.Block{}
	}
	return &Result{IsError: true, Error: &ToolError{Message: msg}, Content: content,
		AdditionalContexts: d.AdditionalContexts}
}

// materialize runs finalizeContent once (PIPE-17), attaches mutations and the turn mark
// (PIPE-18, RES-5) and notifies tools/result (PIPE-19).
func (r *Registry) materialize(ctx context.Context, p *Prepared, res *Result) *Result {
	e := p.Exec
	if p.finalize != nil {
		content, err := callFinalize(p.finalize, e, res)
		switch {
		case err != nil:
			res = keepContexts(failureOf(fmt.Errorf("finalizeContent failed: %w", err)), res)
		case content != nil:
			c := *res
			c.Content = content
			res = &c
		}
	}
	muts, concludes := e.finalState()
	if len(muts) > 0 || (concludes && !res.IsError) {
		c := *res
		c.Mutations = append([]FileMutation(nil), muts...)
		c.ConcludesTurn = concludes && !res.IsError
		res = &c
	}
	if r.Hooks.Result.Len() > 0 {
		r.Hooks.Result.Notify(ctx, e.Scope, &Call{Exec: e, Result: res})
	}
	return res
}

func callFinalize(f func(*Execution, *Result) ([]llm.Block, error), e *Execution, res *Result) (c []llm.Block, err error) {
	defer func() { err = recoverErr(recover(), err) }()
	return f(e, res)
}
