package agents

import (
	"fmt"
	"slices"

	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/registry"
)

// declaredScopeSuffix names the scope of a preset version's declared tools: its key is the
// version's scope key with this suffix.
const declaredScopeSuffix = "/declared"

// declareTools registers the preset's declared tools (tools.declared) as client-executed tools
// (registry.ClientTool) in a scope of their own, declared under parent and returned: the
// version's scope is declared under it, so its restrictions (tools.allow, tools.deny) filter the
// declared tools as they filter the built-in ones (a scope's own tools are never filtered,
// SCP-1). The model sees each with the parameters schema the preset wrote; a call of one parks
// its turn until the client posts the result. Without declared tools it returns parent. A
// declared tool may not take a built-in tool's name: Rules refuses such a preset, and one stored
// before the name became a built-in fails its setup rather than shadow the built-in tool.
func (a *Agents) declareTools(sc *scope, parent *kernel.Scope, tools []preset.DeclaredTool) (*kernel.Scope, error) {
	if len(tools) == 0 {
		return parent, nil
	}
	key := sc.key + declaredScopeSuffix
	s, err := a.k.Scopes().Declare(key, parent)
	if err != nil {
		return nil, err
	}
	f := a.k.Fiber(key, s)
	sc.declaredFiber = f
	builtin := a.reg.Names("")
	for _, d := range tools {
		if slices.Contains(builtin, d.Name) {
			return nil, fmt.Errorf("declared tool %q has the name of a built-in tool", clip(d.Name))
		}
		spec := registry.ClientSpec{Name: d.Name, Description: d.Description, Parameters: d.Parameters}
		if d.TimeoutMs != nil {
			spec.TimeoutMs = *d.TimeoutMs
		}
		t, err := registry.ClientTool(spec)
		if err != nil {
			return nil, err
		}
		if _, err := a.reg.Register(f, t); err != nil {
			return nil, err
		}
		sc.declared = append(sc.declared, d.Name)
	}
	return s, nil
}

// declaredNames returns the names of the tools declared in the scope of key (nil for none, or
// for a key that is not a preset version's scope). A scope's declared names are written by its
// setup, before the scope is ready, and only read after.
func (a *Agents) declaredNames(key string) []string {
	a.mu.Lock()
	sc := a.scopes[key]
	a.mu.Unlock()
	if sc == nil {
		return nil
	}
	select {
	case <-sc.ready:
		return sc.declared
	default:
		return nil
	}
}
