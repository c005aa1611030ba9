package registry

import "encoding/json"

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
