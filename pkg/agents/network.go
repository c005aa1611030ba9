package agents

import (
	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/preset"
)

// networkScopeKey is the scope of the definitions that presets with tools.bash.network see in
// place of the global ones (a bash with the egress network).
const networkScopeKey = "sandbox:network"

// mountNetworkTools registers the network definitions of Config.Workspace in their scope, unless
// the operator forbids the sandbox network or there are none (no shell, the local shell).
func (a *Agents) mountNetworkTools() error {
	if a.cfg.Workspace == nil || a.cfg.SandboxNetworkDisabled {
		return nil
	}
	tools, err := a.cfg.Workspace.networkTools()
	if err != nil || len(tools) == 0 {
		return err
	}
	s, err := a.k.Scopes().Declare(networkScopeKey, nil)
	if err != nil {
		return err
	}
	f := a.k.Fiber(networkScopeKey, s)
	for _, t := range tools {
		if _, err := a.reg.Register(f, t); err != nil {
			return err
		}
	}
	a.netScope = s
	return nil
}

// parentScope is the scope a preset version's scope is declared under: the network scope when
// the preset's tools.bash.network is on and the network is offered, else none. It depends only
// on the immutable version and the agents' configuration, so a version's scope always gets the
// same parent.
func (a *Agents) parentScope(p preset.Body) *kernel.Scope {
	if n := p.Tools.Bash.Network; n != nil && *n && a.netScope != nil {
		return a.netScope
	}
	return nil
}

// bindWorkspace records the session's tenant as its workspace's (Config.Workspace), so that the
// tenant's workspace bound counts it. A failure is logged: the tools then work without the tenant
// bound for this session (its I/O on the same root would likely fail too).
func (a *Agents) bindWorkspace(s Session) {
	w := a.cfg.Workspace
	if w == nil || w.Workspaces == nil {
		return
	}
	if err := w.Workspaces.Bind(s.ID.String(), s.TenantID.String()); err != nil {
		a.cfg.Logger.Warn("the session's workspace cannot be bound to its tenant: the tenant's workspace bound does not count it",
			"session", s.ID, "err", err)
	}
}
