package agents

import (
	"fmt"

	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/promptasm"
	"github.com/dshd/dshd/pkg/registry"
)

// The code-mode mount point (docs/rules.md PRS-3..6, CODE-1): Config.CodeRuntime installs run_code in
// the agents' registry, and the prompt of a preset in mode code or both gets the runtime's SDK.

// mountCodeRuntime installs run_code through f when Config.CodeRuntime is set; its sub-calls are
// capped by the agent's maxParallelSubCalls (Settings), and its programs wait for a slot queued
// by the agent's tenant.
func (a *Agents) mountCodeRuntime(f *kernel.Fiber) error {
	rt := a.cfg.CodeRuntime
	if rt == nil {
		return nil
	}
	if _, err := rt.Install(f, a.reg, a.maxParallelSubCalls, a.tenantOf); err != nil {
		return fmt.Errorf("agents: install run_code: %w", err)
	}
	a.codeRuntime = rt.PromptRuntime(a.reg)
	return nil
}

// maxParallelSubCalls is the sub-call cap of an agent whose configuration is held, else 0 (the
// registry's default).
func (a *Agents) maxParallelSubCalls(agent string) int {
	s, _ := a.Settings(agent)
	return s.MaxParallelSubCalls
}

// checkCodeRuntime fails the setup of a preset in mode code or both when no code runtime is
// mounted (PRS-6): the preset fails at mount, not at its first prompt.
func (a *Agents) checkCodeRuntime(m registry.PresentMode) error {
	if m != registry.ModeNative && a.codeRuntime == nil {
		return fmt.Errorf("tools.mode %s: %w: no code runtime is mounted", m, promptasm.ErrCodeRuntime)
	}
	return nil
}
