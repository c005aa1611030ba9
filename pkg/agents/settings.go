package agents

import (
	"context"
	"slices"
	"time"

	"github.com/dshd/dshd/pkg/approval"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/policy"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/promptasm"
	"github.com/dshd/dshd/pkg/registry"
)

// Settings are the preset settings of an agent that are read below the agent loop, by the
// approval service and the code-mode bridge, rather than through agentloop.Config. An agent's
// settings are those of its session's pinned preset version; Agents.Settings returns them by
// agent id.
type Settings struct {
	// Approval is how the agent's asks are resolved.
	Approval Approval
	// MaxParallelSubCalls caps the concurrent sub-calls of one run_code program (PRS-1; the
	// preset's tools.maxParallelSubCalls, default preset.DefaultMaxParallelSubCalls), read by
	// the code-mode bridge (pkg/codemode) through Config.CodeRuntime.
	MaxParallelSubCalls int
}

// Approval is an agent's approval configuration (the preset's approval settings).
type Approval struct {
	// Policy is the agent's configured policy, preset.PolicyAsk or preset.PolicyNever: the
	// "config default" of APR-4 step 2, which the session's last `approval/policy` event
	// overrides (ApprovalPolicy). Under `never` an ask resolves `rejected` at once and
	// no answerer is consulted (Agents resolves it: `Error: the user rejected tool "<n>"`,
	// {ApprovalRejectedError, APPROVAL_REJECTED}). Under `ask` the ask goes to the approval
	// service; until one is mounted it is denied (APR-1: `tool "<n>" requires approval (not
	// yet supported)`).
	Policy string
	// Timeout is how long an ask waits for an answer before it resolves `cancelled` (docs/architecture.md:
	// "a timeout resolves it as cancelled"; the preset's approval.timeoutMs, default
	// preset.DefaultApprovalTimeoutMs), read by the approval service (pkg/approval) through
	// ApprovalTimeout.
	Timeout time.Duration
	// Ask are the tools whose calls ask for approval (PIPE-4), sorted and without duplicates.
	Ask []string
}

// canAsk reports whether the calls of a preset may ask for approval: it has an approval.ask
// list, a pre-execute policy rule that decides ask, or a pre-execute policy webhook (which may
// answer ask).
func canAsk(b preset.Body) bool {
	if len(b.Approval.Ask) > 0 || b.Policies.Webhooks.PreExecute != "" {
		return true
	}
	for _, r := range b.Policies.PreExecute {
		if r.Decision == policy.DecisionAsk {
			return true
		}
	}
	return false
}

// settingsOf returns the settings of a preset body, with the defaults of what it leaves out.
func settingsOf(b preset.Body) Settings {
	b.Normalize() // b is a copy: Normalize replaces nil fields only
	ask := slices.Clone(b.Approval.Ask)
	slices.Sort(ask)
	return Settings{
		Approval: Approval{Policy: b.Approval.Policy, Timeout: time.Duration(*b.Approval.TimeoutMs) * time.Millisecond,
			Ask: slices.Compact(ask)},
		MaxParallelSubCalls: *b.Tools.MaxParallelSubCalls,
	}
}

func (s Settings) clone() Settings {
	s.Approval.Ask = slices.Clone(s.Approval.Ask)
	return s
}

// Settings returns the settings of an agent: the agent id is the session id (the Agent of its
// tool executions and approval requests). They are known while the session's agent
// configuration is held, from Agent until its release; ok is false for any other agent.
func (a *Agents) Settings(agent string) (s Settings, ok bool) {
	a.heldMu.RLock()
	defer a.heldMu.RUnlock()
	h, ok := a.held[agent]
	if !ok {
		return Settings{}, false
	}
	return h.sc.settings.clone(), true
}

// held is an agent whose configuration is held: n holders, of the scope sc; policy is the
// approval policy of the session's last `approval/policy` event its runner has read ("" for
// none, under heldMu).
type held struct {
	sc     *scope
	n      int
	policy string
	tenant string // the session's tenant: run_code's fair queue (tenantOf)
}

// hold records that the configuration of agent (a session of tenant), of scope sc, is held once
// more; the func it returns undoes that.
func (a *Agents) hold(agent, tenant string, sc *scope) func() {
	a.heldMu.Lock()
	defer a.heldMu.Unlock()
	h := a.held[agent]
	if h == nil {
		h = &held{tenant: tenant}
		a.held[agent] = h
	}
	h.sc = sc // the latest: a session's agent is always of its one pinned version
	h.n++
	return func() {
		a.heldMu.Lock()
		defer a.heldMu.Unlock()
		if h.n--; h.n == 0 && a.held[agent] == h {
			delete(a.held, agent)
		}
	}
}

// approve is the approver the agents' registry has mounted (APR-1): the asks of a held agent go
// to Config.Approvals (pkg/approval: asked and decided through the session log, with the
// agent's timeout, ApprovalTimeout, and its policy in force, ApprovalPolicy, checked again
// against the running turn's events). Without one, the asks of an agent under policy `never`
// resolve `rejected` without an answer (APR-4 step 2; `cancelled` when the call's signal is
// already aborted, step 1), and the others are passed on (registry.ErrNoApprovalService) and
// denied as without an approval service.
func (a *Agents) approve(ctx context.Context, req registry.ApprovalRequest) (string, error) {
	policy, ok := a.ApprovalPolicy(req.Agent)
	if ok && a.cfg.Approvals != nil {
		req.Policy, req.Timeout = policy, a.ApprovalTimeout(req.Agent)
		return a.cfg.Approvals.Approve(ctx, req)
	}
	if !ok || policy != preset.PolicyNever {
		return "", registry.ErrNoApprovalService
	}
	if ctx.Err() != nil {
		return registry.OutcomeCancelled, nil
	}
	return registry.OutcomeRejected, nil
}

// ApprovalPolicy returns the approval policy in force for agent (APR-4 step 2, APR-6): the
// session's last `approval/policy` event its runner has read, else the preset's
// approval.policy (ask by default); ok is false when the agent is not held.
// pkg/approval's Config.PolicyFunc.
func (a *Agents) ApprovalPolicy(agent string) (policy string, ok bool) {
	a.heldMu.RLock()
	defer a.heldMu.RUnlock()
	h, ok := a.held[agent]
	if !ok {
		return "", false
	}
	return approval.Effective(h.policy, h.sc.settings.Approval.Policy), true
}

// observe is the agent loop's Config.Observe of agent: it follows the session's
// `approval/policy` events.
func (a *Agents) observe(agent string) func(eventlog.Event) {
	return func(ev eventlog.Event) {
		p, ok := approval.PolicyOf(ev)
		if !ok {
			return
		}
		a.heldMu.Lock()
		if h := a.held[agent]; h != nil {
			h.policy = p
		}
		a.heldMu.Unlock()
	}
}

// policyContext is the text of the runtime-context entry approval:policy (APR-6): the policy in
// force, for a held agent whose preset can ask (canAsk) or whose session set a policy; nothing
// otherwise, so agents that never ask get no snapshot for it.
func (a *Agents) policyContext(_ context.Context, in promptasm.Input) (string, error) {
	a.heldMu.RLock()
	h, ok := a.held[in.Agent]
	var logged, configured string
	var canAsk bool
	if ok {
		logged, configured, canAsk = h.policy, h.sc.settings.Approval.Policy, h.sc.canAsk
	}
	a.heldMu.RUnlock()
	if !ok || (!canAsk && logged == "") {
		return "", nil
	}
	return approval.PolicyText(approval.Effective(logged, configured)), nil
}

// ApprovalTimeout returns how long an ask of agent waits for an answer (the preset's
// approval.timeoutMs), 0 when the agent is not held. pkg/approval's Config.TimeoutFunc.
func (a *Agents) ApprovalTimeout(agent string) time.Duration {
	s, ok := a.Settings(agent)
	if !ok {
		return 0
	}
	return s.Approval.Timeout
}

// tenantOf is the tenant of a held agent, "" for one not held: the tenant by which the agent's
// run_code programs wait for a slot (codemode.TenantFunc).
func (a *Agents) tenantOf(agent string) string {
	a.heldMu.RLock()
	defer a.heldMu.RUnlock()
	if h, ok := a.held[agent]; ok {
		return h.tenant
	}
	return ""
}
