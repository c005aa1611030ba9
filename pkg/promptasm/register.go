package promptasm

import (
	"fmt"
	"math"
	"sync"
)

// Every registration method files its entry in the layer of scope (Global or a scope key) and
// returns an idempotent disposer that removes exactly that entry. A registration and a disposal
// each notify the change listeners (PRM-10). When a change listener fails during a registration,
// the registration is rolled back and the error returned; a later registration of the same name
// succeeds. Listener errors during a disposal are dropped: there is nothing to roll back to.

// Section registers a prompt section (PRM-2).
func (r *Registry) Section(scope string, s Section) (func(), error) {
	if err := checkNamed("prompt section", s.Name, s.Order); err != nil {
		return nil, err
	}
	return r.register(scope, func(l *layer) (uint64, error) {
		if l.sections.has(s.Name) {
			return 0, fmt.Errorf("prompt section %q: %w", clip(s.Name), ErrDuplicate)
		}
		e := entryOf(r, s.Name, s)
		l.sections = l.sections.add(e)
		return e.id, nil
	})
}

// RuntimeContext registers a runtime-context entry (PRM-9). A scoped entry shadows a farther one
// of the same name.
func (r *Registry) RuntimeContext(scope string, c ContextEntry) (func(), error) {
	if err := checkNamed("prompt context", c.Name, c.Order); err != nil {
		return nil, err
	}
	return r.register(scope, func(l *layer) (uint64, error) {
		if l.contexts.has(c.Name) {
			return 0, fmt.Errorf("prompt context %q: %w", clip(c.Name), ErrDuplicate)
		}
		e := entryOf(r, c.Name, c)
		l.contexts = l.contexts.add(e)
		return e.id, nil
	})
}

// Variable registers a {{name}} variable (PRM-3). The name must match [a-z][a-z0-9_]*.
func (r *Registry) Variable(scope, name string, fn VariableFunc) (func(), error) {
	if !validVariableName(name) {
		return nil, fmt.Errorf("prompt variable %q must match [a-z][a-z0-9_]*: %w", clip(name), ErrInvalidName)
	}
	if fn == nil {
		return nil, fmt.Errorf("prompt variable %q: nil VariableFunc", clip(name))
	}
	return r.register(scope, func(l *layer) (uint64, error) {
		if l.variables.has(name) {
			return 0, fmt.Errorf("prompt variable %q: %w", clip(name), ErrDuplicate)
		}
		e := entryOf(r, name, fn)
		l.variables = l.variables.add(e)
		return e.id, nil
	})
}

// Tools registers a tool provider (PRM-4). Global providers run first, then the chain's from
// farthest to nearest, each layer in registration order.
func (r *Registry) Tools(scope string, fn ToolProviderFunc) (func(), error) {
	if fn == nil {
		return nil, fmt.Errorf("prompt tools: nil ToolProviderFunc")
	}
	return r.register(scope, func(l *layer) (uint64, error) {
		e := entryOf(r, "", fn)
		l.tools = l.tools.add(e)
		return e.id, nil
	})
}

// SuppressRuntimeContext drops all runtime context from assemblies whose chain includes scope
// (every assembly for Global), including entries added by listeners, until disposed (PRM-6).
// Several suppressors are independent.
func (r *Registry) SuppressRuntimeContext(scope string) (func(), error) {
	return r.register(scope, func(l *layer) (uint64, error) {
		e := entryOf(r, "", struct{}{})
		l.suppressors = l.suppressors.add(e)
		return e.id, nil
	})
}

// OnAssemble adds a listener to the assemble waterfall (PRM-6). A Global listener sees every
// assembly; a scoped one only assemblies whose chain includes its scope. The participating
// listeners run in registration order, whatever their layer, the first outermost. It does not
// notify change listeners.
func (r *Registry) OnAssemble(scope string, fn AssembleListener) (func(), error) {
	if fn == nil {
		return nil, fmt.Errorf("prompt assemble listener: nil AssembleListener")
	}
	r.mu.Lock()
	e := entryOf(r, "", fn)
	l := r.layerLocked(scope)
	l.listeners = l.listeners.add(e)
	r.mu.Unlock()
	return r.disposer(scope, e.id, false), nil
}

// OnChange adds a change listener, called after every registration and disposal (PRM-10). It is
// unfiltered: a change in any layer reaches every listener. A listener that returns an error
// during a registration rolls that registration back. The returned func removes the listener.
func (r *Registry) OnChange(fn func() error) func() {
	r.mu.Lock()
	e := entryOf(r, "", fn)
	r.changes = r.changes.add(e)
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			r.changes = r.changes.remove(e.id)
			r.mu.Unlock()
		})
	}
}

// register runs add on scope's layer under the lock, then notifies change listeners without it,
// rolling back on a listener error. add files one entry made by entryOf and returns its id.
func (r *Registry) register(scope string, add func(l *layer) (uint64, error)) (func(), error) {
	r.mu.Lock()
	id, err := add(r.layerLocked(scope))
	if err != nil {
		r.dropIfEmptyLocked(scope)
		r.mu.Unlock()
		return nil, err
	}
	r.mu.Unlock()
	if err := r.notify(); err != nil {
		r.remove(scope, id)
		return nil, fmt.Errorf("prompt change listener failed, registration rolled back: %w", err)
	}
	return r.disposer(scope, id, true), nil
}

func (r *Registry) disposer(scope string, id uint64, notify bool) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			r.remove(scope, id)
			if notify {
				_ = r.notify() // see the contract above: a disposal cannot be rolled back
			}
		})
	}
}

func (r *Registry) remove(scope string, id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l, ok := r.layers[scope]; ok {
		l.remove(id)
		r.dropIfEmptyLocked(scope)
	}
}

// notify calls the change listeners in registration order and stops at the first error.
func (r *Registry) notify() error {
	r.mu.RLock()
	listeners := r.changes
	r.mu.RUnlock()
	for _, e := range listeners {
		if err := e.v(); err != nil {
			return err
		}
	}
	return nil
}

func (r *Registry) layerLocked(scope string) *layer {
	l, ok := r.layers[scope]
	if !ok {
		l = &layer{}
		r.layers[scope] = l
	}
	return l
}

// dropIfEmptyLocked reclaims an empty scoped layer; the global layer always stays.
func (r *Registry) dropIfEmptyLocked(scope string) {
	if l, ok := r.layers[scope]; ok && scope != Global && l.empty() {
		delete(r.layers, scope)
	}
}

func checkNamed(kind, name string, order float64) error {
	if name == "" {
		return fmt.Errorf("%s name must be non-empty: %w", kind, ErrInvalidName)
	}
	if math.IsNaN(order) || math.IsInf(order, 0) {
		return fmt.Errorf("%s %q: %w", kind, clip(name), ErrInvalidOrder)
	}
	return nil
}

// validVariableName reports whether name matches [a-z][a-z0-9_]*.
func validVariableName(name string) bool {
	if name == "" || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := 1; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}
