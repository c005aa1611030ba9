package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/sandbox"
	"github.com/dshd/dshd/pkg/tools/web"
)

// workspaceTools builds the workspace tools of the configuration: none without a workspace root
// (nil, nil); otherwise the workspaces and, unless DSHD_SHELL=off, bash's provider. A bwrap that
// cannot run here, or a local provider not asked for, is an error: the server does not start.
func (c Config) workspaceTools(log *slog.Logger) (*agents.WorkspaceTools, error) {
	if c.WorkspaceRoot == "" {
		return nil, nil
	}
	wc := sandbox.WorkspacesConfig{Root: c.WorkspaceRoot, QuotaBytes: c.WorkspaceQuota}
	wc.TenantQuotaBytes = c.TenantWorkspaceBytes
	var shell sandbox.Provider
	switch c.Shell {
	case "bwrap":
		b, err := sandbox.NewBwrap(sandbox.BwrapConfig{UID: c.SandboxUser[0], GID: c.SandboxUser[1],
			MemoryBytes: c.SandboxMemoryBytes, Logger: log, EgressDeny: c.SandboxEgressDeny})
		if err != nil {
			return nil, fmt.Errorf("dshd: DSHD_SHELL=bwrap: %w (or set DSHD_SHELL=off for no bash tool)", err)
		}
		if uid, gid, ok := b.Owner(); ok {
			wc.Owner = &sandbox.Owner{UID: uid, GID: gid}
		}
		if c.SandboxNetwork {
			if err := b.ProbeNetwork(context.Background()); err != nil {
				log.Warn("DSHD_SANDBOX_NETWORK=1 but the sandbox's egress network cannot run here: "+
					"commands of presets with tools.bash.network will fail", "err", err)
			}
		}
		shell = b
	case "local":
		l, err := sandbox.NewLocal(sandbox.LocalConfig{Enabled: true})
		if err != nil {
			return nil, fmt.Errorf("dshd: DSHD_SHELL=local: %w", err)
		}
		log.Warn("DSHD_SHELL=local: bash runs on the host without isolation; for single-user development only")
		shell = l
	}
	ws, err := sandbox.NewWorkspaces(wc)
	if err != nil {
		return nil, fmt.Errorf("dshd: DSHD_WORKSPACE_ROOT: %w", err)
	}
	slots, err := c.CPU.commandSlots()
	if err != nil {
		return nil, err
	}
	return &agents.WorkspaceTools{Workspaces: ws, Shell: shell, Web: web.Config{AllowPrivate: c.WebAllowPrivate}, CommandSlots: slots}, nil
}
