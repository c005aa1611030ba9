package registry

import (
	"context"
	"fmt"
	"slices"

	"github.com/dshd/dshd/pkg/kernel"
)

// GuardFunc is a synchronous guard (GRD-1): a non-empty reason denies the call.
type GuardFunc func(exec *Execution) (reason string)

type guard struct{ fn GuardFunc }

// Guard registers fn in f's layer (GRD-1). Guard registration emits no change event (REG-6).
func (r *Registry) Guard(f *kernel.Fiber, fn GuardFunc) (kernel.Disposer, error) {
	if err := active(f); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, fmt.Errorf("registry: guard is nil")
	}
	scope := f.Scope()
	g := &guard{fn}
	r.mu.Lock()
	l := r.layerLocked(scope)
	l.guards = append(l.guards, g)
	r.mu.Unlock()
	d := kernel.Once(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if l := r.layers[scope]; l != nil {
			l.guards = slices.DeleteFunc(l.guards, func(x *guard) bool { return x == g })
			r.reclaimLocked(scope)
		}
	})
	if err := f.Track(d); err != nil {
		return nil, err
	}
	return d, nil
}

// guardsLocked returns the guards for a call in scope: global first, then the chain farthest
// to nearest, each in registration order (GRD-1).
func (r *Registry) guardsLocked(scope *kernel.Scope) []*guard {
	out := r.layers[nil].guards
	if scope == nil {
		return out
	}
	chain := scope.Chain()
	out = append([]*guard(nil), out...)
	for i := len(chain) - 1; i >= 0; i-- {
		if l := r.layers[chain[i]]; l != nil {
			out = append(out, l.guards...)
		}
	}
	return out
}

// runGuards returns the first guard's reason (GRD-1); a panicking guard is an error (GRD-3).
func (r *Registry) runGuards(e *Execution) (reason string, err error) {
	r.mu.RLock()
	gs := r.guardsLocked(e.Scope)
	r.mu.RUnlock()
	if len(gs) == 0 {
		return "", nil
	}
	defer func() { err = r.recovered(context.Background(), "guard", recover(), err) }()
	for _, g := range gs {
		if reason := g.fn(e); reason != "" {
			return reason, nil
		}
	}
	return "", nil
}
