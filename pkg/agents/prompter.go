package agents

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/promptasm"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/tools/demo"
	"github.com/dshd/dshd/pkg/tools/todo"
)

// BuiltinTools returns the tools every agent may use: todo_write, plus the demo pack (echo,
// sleep, wait, fail) when withDemo is set, plus the workspace tools (bash, read, write, edit,
// glob, grep, web_fetch) of each WorkspaceTools given (at most one).
func BuiltinTools(withDemo bool, workspace ...WorkspaceTools) ([]*registry.Tool, error) {
	td, err := todo.Tool()
	if err != nil {
		return nil, err
	}
	tools := []*registry.Tool{td}
	for _, w := range workspace {
		wt, err := w.tools()
		if err != nil {
			return nil, err
		}
		tools = append(tools, wt...)
	}
	if withDemo {
		d, err := demo.Tools()
		if err != nil {
			return nil, err
		}
		tools = append(tools, d...)
	}
	return tools, nil
}

// Prompter answers what a stored session's agent would send the model, reading the session's
// pinned preset version.
type Prompter struct {
	Agents  *Agents
	Presets *pgstore.Presets
}

// Prompt returns the system prompt and wire tools of the session's next model request. An assembly
// failure (a *promptasm.AssemblyError) or a model provider that cannot be used (an *llm.Error)
// is a fault.PromptFailed error wrapping it.
func (p Prompter) Prompt(ctx context.Context, tenantID uuid.UUID, sess eventlog.Session) (string, []llm.ToolSchema, error) {
	if sess.PresetID == nil {
		return "", nil, fault.New(fault.NoPreset, "the session has no preset to run its turns")
	}
	pv, err := p.Presets.PresetVersionGet(ctx, tenantID, *sess.PresetID, sess.PresetVersion)
	if err != nil {
		return "", nil, err
	}
	res, err := p.Agents.Prompt(ctx, Session{ID: sess.ID, TenantID: tenantID, Preset: pv})
	var (
		ae *promptasm.AssemblyError
		le *llm.Error
	)
	if errors.As(err, &ae) || errors.As(err, &le) {
		return "", nil, fault.Wrap(fault.PromptFailed, err, err.Error())
	}
	if err != nil {
		return "", nil, err
	}
	return res.System, res.Tools, nil
}

// Tools returns the catalogue of built-in tools.
func (p Prompter) Tools() ([]registry.CatalogueItem, error) { return p.Agents.Registry().Catalogue() }
