package registry

import (
	"encoding/json"
	"sort"

	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
)

// resolveLocked returns the tool name as scope sees it (SCP-1, REG-5): the scope's own tool,
// else the nearest inherited one if every restriction on the chain permits it; run_code only
// when the effective mode is not native. Callers hold r.mu (read).
func (r *Registry) resolveLocked(name string, scope *kernel.Scope) *entry {
	if name == RunCodeName {
		if r.runCode != nil && r.modeLocked(scope) != ModeNative {
			return r.runCode
		}
		return nil
	}
	if scope == nil {
		return r.layers[nil].tools[name]
	}
	if l := r.layers[scope]; l != nil {
		if e := l.tools[name]; e != nil {
			return e
		}
	}
	var e *entry
	for s := scope.Parent(); e == nil; s = s.Parent() {
		if l := r.layers[s]; l != nil {
			e = l.tools[name]
		}
		if s == nil {
			break
		}
	}
	if e == nil {
		return nil
	}
	for s := scope; s != nil; s = s.Parent() {
		if l := r.layers[s]; l != nil {
			for _, rs := range l.restrictions {
				if !rs.permits(name) {
					return nil
				}
			}
		}
	}
	return e
}

func (r *Registry) resolve(name string, scope *kernel.Scope) *entry {
	r.mu.RLock()
	e := r.resolveLocked(name, scope)
	r.mu.RUnlock()
	return e
}

// modeLocked returns scope's effective mode: the nearest declaration on the chain, else the
// deployment default (PRS-2).
func (r *Registry) modeLocked(scope *kernel.Scope) PresentMode {
	for s := scope; s != nil; s = s.Parent() {
		if l := r.layers[s]; l != nil && l.mode != nil {
			return *l.mode
		}
	}
	return r.cfg.Mode
}

// EffectiveMode returns the presentation mode of the scope with key scopeKey ("" = unscoped).
func (r *Registry) EffectiveMode(scopeKey string) PresentMode {
	scope, _ := r.scopes.Lookup(scopeKey)
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.modeLocked(scope)
}

// Get returns a copy of the definition name resolves to in the scope scopeKey, with shadowing
// and restrictions applied (REG-5).
func (r *Registry) Get(name, scopeKey string) (Tool, bool) {
	scope, _ := r.scopes.Lookup(scopeKey)
	e := r.resolve(name, scope)
	if e == nil {
		return Tool{}, false
	}
	return e.Tool, true
}

// visibleLocked returns the scope's view sorted by name (SCP-1).
func (r *Registry) visibleLocked(scope *kernel.Scope) []*entry {
	names := map[string]bool{}
	for s := scope; ; s = s.Parent() {
		if l := r.layers[s]; l != nil {
			for n := range l.tools {
				names[n] = true
			}
		}
		if s == nil {
			break
		}
	}
	names[RunCodeName] = true
	var out []*entry
	for n := range names {
		if e := r.resolveLocked(n, scope); e != nil {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names returns the names visible to scopeKey, sorted.
func (r *Registry) Names(scopeKey string) []string {
	scope, _ := r.scopes.Lookup(scopeKey)
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []string
	for _, e := range r.visibleLocked(scope) {
		out = append(out, e.Name)
	}
	return out
}

// Schemas returns {name, description, parameters} of every tool visible to scopeKey, sorted by
// name, parameters deep-copied (REG-4). It fails when a parameters schema is not lossless JSON
// (REG-3). The mode does not change it apart from adding run_code (PRS-3).
func (r *Registry) Schemas(scopeKey string) ([]llm.ToolSchema, error) {
	scope, _ := r.scopes.Lookup(scopeKey)
	r.mu.RLock()
	vis := r.visibleLocked(scope)
	r.mu.RUnlock()
	out := make([]llm.ToolSchema, 0, len(vis))
	for _, e := range vis {
		s, err := e.schema()
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// CatalogueItem is one entry of `GET /v1/tools`.
type CatalogueItem struct {
	Name            string          `json:"name"`
	Description     string          `json:"description"`
	Parameters      json.RawMessage `json:"parameters"`
	ConcurrencySafe bool            `json:"concurrencySafe"`
}

// Catalogue lists the global layer's tools, sorted by name. ConcurrencySafe is true when the
// tool advertises Parallel or its classifier accepts an empty argument object.
func (r *Registry) Catalogue() ([]CatalogueItem, error) {
	r.mu.RLock()
	vis := r.visibleLocked(nil)
	r.mu.RUnlock()
	out := make([]CatalogueItem, 0, len(vis))
	for _, e := range vis {
		s, err := e.schema()
		if err != nil {
			return nil, err
		}
		safe := e.IsConcurrencySafe != nil && (e.Parallel || classify(e, json.RawMessage(`{}`)))
		out = append(out, CatalogueItem{s.Name, s.Description, s.Parameters, safe})
	}
	return out, nil
}

// ExecutionMode classifies a call for the scheduler (REG-9): Parallel only when the visible,
// uncollapsed definition's classifier returns true for the call's arguments. Unknown, hidden
// and collapsed tools, a missing classifier, a panic and invalid arguments give Exclusive.
func (r *Registry) ExecutionMode(in Input) Mode {
	scope, _ := r.scopes.Lookup(in.Scope)
	r.mu.RLock()
	e := r.resolveLocked(in.Name, scope)
	collapsed := e != nil && in.Parent == nil && in.Name != RunCodeName && r.modeLocked(scope) == ModeCode
	r.mu.RUnlock()
	if e == nil || collapsed || e.IsConcurrencySafe == nil || !lossless(in.Args) {
		return Exclusive
	}
	if classify(e, in.Args) {
		return Parallel
	}
	return Exclusive
}

func classify(e *entry, args json.RawMessage) (safe bool) {
	defer func() {
		if recover() != nil {
			safe = false
		}
	}()
	return e.IsConcurrencySafe(args)
}
