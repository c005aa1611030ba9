package registry

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/kernel"
)

// Prepare runs the creation and prepare stages (PIPE-1..7, PRS-5, APR-1, GRD-1..3): it copies
// the arguments, resolves the tool, and runs pre-execute, approval and guards. ctx is the
// caller's signal. The returned Prepared's Kind tells the scheduler to Dispatch (PrepDispatch)
// or Finish.
func (r *Registry) Prepare(ctx context.Context, in Input) *Prepared {
	p := &Prepared{}
	e := &p.exec
	p.Exec = e
	scope, _ := r.scopes.Lookup(in.Scope)
	*e = Execution{CallID: in.CallID, Name: in.Name, RootCallID: in.RootCallID, Agent: in.Agent,
		Scope: scope, Location: in.Location, Parent: in.Parent, reg: r, log: in.Log,
		park: in.Park && in.Parent == nil}
	e.token.exec, e.prep = e, p
	if e.RootCallID == "" {
		e.RootCallID = e.CallID
	}
	r.mu.RLock()
	p.tool = r.resolveLocked(in.Name, scope)
	collapsed := p.tool != nil && in.Parent == nil && in.Name != RunCodeName && r.modeLocked(scope) == ModeCode
	r.mu.RUnlock()
	if p.tool != nil {
		p.finalize = p.tool.FinalizeContent
		p.timeoutMs = p.tool.TimeoutMs
	}
	if p.timeoutMs == 0 {
		p.timeoutMs = r.cfg.DefaultTimeoutMs
	}
	if !lossless(in.Args) {
		return p.final(failure(msgArgsNotLossless, nil))
	}
	e.Args = append(make([]byte, 0, len(in.Args)), in.Args...)
	if collapsed {
		if ctx.Err() != nil {
			return p.final(AbortedBeforeDispatchResult())
		}
		p.finalize = nil
		return p.final(collapsedResult(in.Name))
	}
	// A resumed call goes on from where it parked even when the turn was cancelled meanwhile:
	// its ask is decided cancelled in the log, a started client call ends ABORTED.
	if rs := in.Resumed; rs != nil && in.Parent == nil && p.tool != nil {
		switch {
		case rs.Client != nil:
			// Fully prepared before the park: only the dispatch stage is left.
			c := *rs.Client
			p.client = &c
			p.Kind = PrepDispatch
			return p
		case rs.Aborted:
			p.clientAborted = true
			p.Kind = PrepDispatch
			return p
		case rs.Ask != nil:
			return r.decideFrom(ctx, p, Decision{Kind: DecisionAsk, Reason: rs.Ask.Reason})
		}
	}
	if ctx.Err() != nil {
		return p.final(AbortedBeforeDispatchResult())
	}
	return r.decide(ctx, p)
}

func (p *Prepared) final(res *Result) *Prepared {
	p.Kind, p.result = PrepFinalResult, res
	return p
}

func (p *Prepared) post(res *Result) *Prepared {
	p.Kind, p.result = PrepPostResult, res
	return p
}

// decide runs pre-execute, approval, guards and the PIPE-7 abort check.
func (r *Registry) decide(ctx context.Context, p *Prepared) *Prepared {
	d, err := r.preExecute(ctx, p.Exec)
	if err != nil {
		return p.final(failureOf(err))
	}
	return r.decideFrom(ctx, p, d)
}

// decideFrom continues decide after pre-execute decided d (a resumed ask starts here).
func (r *Registry) decideFrom(ctx context.Context, p *Prepared, d Decision) *Prepared {
	e := p.Exec
	switch d.Kind {
	case DecisionDeny:
		return p.post(denied(d.Reason, NameToolDenied, fault.CodeToolDenied))
	case DecisionAsk:
		allow, res, kind := r.ask(ctx, e, d.Reason)
		if !allow {
			p.Kind, p.result = kind, res
			return p
		}
	case DecisionAllow:
	default:
		return p.final(failure(fmt.Sprintf("tools/pre-execute returned an unknown decision kind %d", d.Kind), nil))
	}
	reason, err := r.runGuards(e)
	if err != nil {
		return p.final(failureOf(err))
	}
	if reason != "" {
		return p.post(denied(reason, NameToolDenied, fault.CodeToolDenied))
	}
	if ctx.Err() != nil {
		return p.post(AbortedBeforeDispatchResult())
	}
	p.Kind = PrepDispatch
	return p
}

func (r *Registry) preExecute(ctx context.Context, e *Execution) (d Decision, err error) {
	if r.Hooks.PreExecute.Len() == 0 {
		return Decision{}, nil
	}
	defer func() { err = r.recovered(ctx, "tools/pre-execute", recover(), err) }()
	return r.Hooks.PreExecute.Run(ctx, e.Scope, e)
}

// recovered turns a recovered panic into an error and logs its stack.
func (r *Registry) recovered(ctx context.Context, stage string, v any, err error) error {
	if v == nil {
		return err
	}
	perr := kernel.Recover(v, err).(*kernel.PanicError)
	r.log.ErrorContext(ctx, "registry: panic", slog.String("stage", stage), slog.Any("panic", v), slog.String("stack", string(perr.Stack)))
	return perr
}

func recoverErr(v any, err error) error { return kernel.Recover(v, err) }

// nextCommitOrder returns the next RES-6 commitOrder for agent.
func (r *Registry) nextCommitOrder(agent string) int64 {
	if r.cfg.CommitOrderFunc != nil {
		return r.cfg.CommitOrderFunc(agent)
	}
	return r.commit.Add(1)
}
