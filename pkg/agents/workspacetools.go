package agents

import (
	"errors"

	"github.com/dshd/dshd/pkg/fairq"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/sandbox"
	"github.com/dshd/dshd/pkg/tools/bash"
	"github.com/dshd/dshd/pkg/tools/fs"
	"github.com/dshd/dshd/pkg/tools/search"
	"github.com/dshd/dshd/pkg/tools/web"
)

// WorkspaceTools configures the built-in tools that work in a session's workspace (the session
// id is the workspace id): read, write, edit, glob, grep, web_fetch and, with a shell, bash.
// Presets narrow them like any tool (tools.allow, tools.deny). Given to the agents too
// (Config.Workspace), they bind each session's workspace to its tenant (the tenant bound,
// sandbox.WorkspacesConfig.TenantQuotaBytes) and give presets with tools.bash.network a bash
// with the network.
type WorkspaceTools struct {
	// Workspaces holds the workspaces. Required.
	Workspaces *sandbox.Workspaces
	// Shell runs bash's commands; nil: no bash tool.
	Shell sandbox.Provider
	// Web configures web_fetch.
	Web web.Config
	// CommandSlots bounds bash's concurrent commands, in total and per tenant, for both bash
	// definitions (bash.Config.Slots); nil: no bound.
	CommandSlots *fairq.Queue
}

func (w WorkspaceTools) tools() ([]*registry.Tool, error) {
	if w.Workspaces == nil {
		return nil, errors.New("agents: WorkspaceTools.Workspaces is required")
	}
	out, err := fs.Tools(fs.Config{Workspaces: w.Workspaces})
	if err != nil {
		return nil, err
	}
	s, err := search.Tools(search.Config{Workspaces: w.Workspaces})
	if err != nil {
		return nil, err
	}
	out = append(out, s...)
	wf, err := web.Tool(w.Web)
	if err != nil {
		return nil, err
	}
	out = append(out, wf)
	if w.Shell != nil {
		b, err := bash.Tool(bash.Config{Shell: w.Shell, Workspaces: w.Workspaces, Slots: w.CommandSlots})
		if err != nil {
			return nil, err
		}
		out = append([]*registry.Tool{b}, out...)
	}
	return out, nil
}

// networkTools are the definitions that replace the global ones for presets whose
// tools.bash.network is on: bash with the egress network. None without a shell, or with the local
// shell (which isolates nothing: its one bash already has the host's network).
func (w WorkspaceTools) networkTools() ([]*registry.Tool, error) {
	if w.Workspaces == nil || w.Shell == nil || w.Shell.Name() == "local" {
		return nil, nil
	}
	b, err := bash.Tool(bash.Config{Shell: w.Shell, Workspaces: w.Workspaces, Network: true, Slots: w.CommandSlots})
	if err != nil {
		return nil, err
	}
	return []*registry.Tool{b}, nil
}
