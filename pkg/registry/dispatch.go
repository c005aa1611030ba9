package registry

import (
	"context"
	"errors"
	"time"

	"github.com/dshd/dshd/pkg/llm"
)

// Dispatch runs the dispatch stage of a PrepDispatch call (PIPE-8..12, RES-7/E2): the
// tools/execute wrappers around the body, bounded by the tool's timeout. ctx is the caller's
// signal. Safe to call concurrently for different executions; call it once per Prepared. For
// other kinds it returns the prepared result unchanged, to be finished by Finalize.
func (r *Registry) Dispatch(ctx context.Context, p *Prepared) *Settled {
	s := &p.settled
	s.p = p
	if p.Kind != PrepDispatch {
		s.result, s.final = p.result, p.Kind == PrepFinalResult
		return s
	}
	runCtx := ctx
	var cancel context.CancelFunc
	if p.timeoutMs > 0 {
		runCtx, cancel = context.WithTimeout(ctx, time.Duration(p.timeoutMs)*time.Millisecond)
		defer cancel()
	}
	p.dispCtx = runCtx
	res, err := r.runExecute(runCtx, p)
	switch {
	case err != nil:
		s.result, s.final = failureOf(err), true
	case res == nil:
		s.result, s.final = failure("tools/execute returned no result", nil), true
	case res != p.canonical:
		s.result = r.revalidate(p, res)
	default:
		s.result = res
	}
	if cancel != nil && ctx.Err() == nil && errors.Is(runCtx.Err(), context.DeadlineExceeded) {
		s.result, s.final = timeoutResult(p.timeoutMs), false
	}
	return s
}

func (r *Registry) runExecute(ctx context.Context, p *Prepared) (res *Result, err error) {
	if r.Hooks.Execute.Len() == 0 {
		return r.runBody(ctx, p.Exec)
	}
	defer func() { err = r.recovered(ctx, "tools/execute", recover(), err) }()
	return r.Hooks.Execute.Run(ctx, p.Exec.Scope, p.Exec)
}

// runBody is the innermost tools/execute: it re-resolves the tool (PIPE-9), runs the body with
// the caller's signal combined with the wrappers' (PIPE-8), and returns the canonical result.
// Body failures and panics are results, not errors (PIPE-10).
func (r *Registry) runBody(ctx context.Context, e *Execution) (*Result, error) {
	p := e.prep
	t := r.resolve(e.Name, e.Scope)
	if t == nil {
		p.canonical = unknownToolResult(e.Name)
		return p.canonical, nil
	}
	if ctx != p.dispCtx && p.dispCtx != nil {
		c, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(p.dispCtx, cancel)
		defer stop()
		defer cancel()
		ctx = c
	}
	e.started.Store(true)
	if t.Client && p.client != nil {
		p.canonical = r.clientResult(e, t, p.client, p.timeoutMs)
		return p.canonical, nil
	}
	if t.Client && p.clientAborted {
		p.canonical = abortedResult()
		return p.canonical, nil
	}
	e.setInBody(true)
	val, err := r.callBody(ctx, t, e)
	e.setInBody(false)
	if err != nil {
		p.canonical = failureOf(err)
	} else {
		p.canonical = r.canonicalize(e, t, val)
	}
	return p.canonical, nil
}

func (r *Registry) callBody(ctx context.Context, t *entry, e *Execution) (val []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = r.recovered(ctx, "tool "+t.Name, v, err)
		}
	}()
	return t.Execute(ctx, e)
}

// canonicalize snapshots a success value, validates it against the output schema, renders it
// and computes meta for top-level calls (SCH-12, PIPE-12).
func (r *Registry) canonicalize(e *Execution, t *entry, val []byte) *Result {
	if !lossless(val) {
		return invalidOutput(t.Name, "value is not lossless JSON")
	}
	if viol := validateOutput(t.out, val); len(viol) > 0 {
		return invalidOutput(t.Name, joinViolations(viol))
	}
	content, err := callRender(t, e.Args, val)
	if err != nil {
		return invalidOutput(t.Name, "render failed: "+errMessage(err))
	}
	res := &Result{Value: val, Content: content}
	if e.Parent == nil && t.Output.PresentationMeta != nil {
		meta, err := callMeta(t, e.Args, val)
		if err != nil {
			return invalidOutput(t.Name, "presentationMeta failed: "+errMessage(err))
		}
		if meta != nil && !lossless(meta) {
			return invalidOutput(t.Name, "presentationMeta returned non-JSON")
		}
		res.Meta = meta
	}
	return res
}

// revalidate re-checks a result a wrapper returned instead of the body's (PIPE-8): a success is
// canonicalized again against the tool the call resolved to; a failure is normalized.
func (r *Registry) revalidate(p *Prepared, res *Result) *Result {
	if res.IsError {
		if res.Error == nil {
			return failure("tools/execute returned a failure without an error", nil)
		}
		if res.Content == nil {
			c := *res
			c.Content = []llm.Block{llm.TextBlock("Error: " + res.Error.Message)}
			return &c
		}
		return res
	}
	t := p.tool
	if t == nil {
		return unknownToolResult(p.Exec.Name)
	}
	return r.canonicalize(p.Exec, t, res.Value)
}

func callRender(t *entry, args, val []byte) (c []llm.Block, err error) {
	defer func() { err = recoverErr(recover(), err) }()
	return t.Output.Render(args, val)
}

func callMeta(t *entry, args, val []byte) (m []byte, err error) {
	defer func() { err = recoverErr(recover(), err) }()
	return t.Output.PresentationMeta(args, val)
}

func joinViolations(v []string) string {
	out := v[0]
	for _, s := range v[1:] {
		out += "; " + s
	}
	return out
}
