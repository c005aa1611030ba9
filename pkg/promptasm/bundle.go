package promptasm

import (
	"fmt"
	"sync"
)

// Variable is a named variable of a Bundle.
type Variable struct {
	Name string
	Func VariableFunc
}

// Bundle is a set of sections and variables registered together by RegisterBundle, for example
// the prompt of one preset version.
type Bundle struct {
	Sections  []Section
	Variables []Variable
}

// RegisterBundle registers every section and variable of b in the layer of scope, all or none,
// and returns one idempotent disposer that removes them all. It checks what Section and Variable
// check (a name registered twice, in b or in the layer, is ErrDuplicate), notifies the change
// listeners once, and takes time linear in the size of b and of the layer, for registration and
// disposal alike: registering n entries one by one copies the layer's lists n times.
func (r *Registry) RegisterBundle(scope string, b Bundle) (func(), error) {
	sections := make(map[string]bool, len(b.Sections))
	for _, s := range b.Sections {
		if err := checkNamed("prompt section", s.Name, s.Order); err != nil {
			return nil, err
		}
		if sections[s.Name] {
			return nil, fmt.Errorf("prompt section %q: %w", clip(s.Name), ErrDuplicate)
		}
		sections[s.Name] = true
	}
	variables := make(map[string]bool, len(b.Variables))
	for _, v := range b.Variables {
		if !validVariableName(v.Name) {
			return nil, fmt.Errorf("prompt variable %q must match [a-z][a-z0-9_]*: %w", clip(v.Name), ErrInvalidName)
		}
		if v.Func == nil {
			return nil, fmt.Errorf("prompt variable %q: nil VariableFunc", clip(v.Name))
		}
		if variables[v.Name] {
			return nil, fmt.Errorf("prompt variable %q: %w", clip(v.Name), ErrDuplicate)
		}
		variables[v.Name] = true
	}
	if len(b.Sections)+len(b.Variables) == 0 {
		return func() {}, nil
	}
	r.mu.Lock()
	l := r.layerLocked(scope)
	for _, e := range l.sections {
		if sections[e.name] {
			r.dropIfEmptyLocked(scope)
			r.mu.Unlock()
			return nil, fmt.Errorf("prompt section %q: %w", clip(e.name), ErrDuplicate)
		}
	}
	for _, e := range l.variables {
		if variables[e.name] {
			r.dropIfEmptyLocked(scope)
			r.mu.Unlock()
			return nil, fmt.Errorf("prompt variable %q: %w", clip(e.name), ErrDuplicate)
		}
	}
	// The bundle's ids are consecutive: [lo, hi] names exactly its entries.
	lo := r.nextID + 1
	secs := make(entries[Section], len(l.sections), len(l.sections)+len(b.Sections))
	copy(secs, l.sections)
	for _, s := range b.Sections {
		secs = append(secs, entryOf(r, s.Name, s))
	}
	vars := make(entries[VariableFunc], len(l.variables), len(l.variables)+len(b.Variables))
	copy(vars, l.variables)
	for _, v := range b.Variables {
		vars = append(vars, entryOf(r, v.Name, v.Func))
	}
	hi := r.nextID
	l.sections, l.variables = secs, vars
	r.mu.Unlock()
	if err := r.notify(); err != nil {
		r.removeRange(scope, lo, hi)
		return nil, fmt.Errorf("prompt change listener failed, registration rolled back: %w", err)
	}
	dispose := sync.OnceFunc(func() {
		r.removeRange(scope, lo, hi)
		_ = r.notify() // a disposal cannot be rolled back
	})
	return dispose, nil
}

// removeRange removes the sections and variables with ids in [lo, hi] from scope's layer, in
// one pass over each list.
func (r *Registry) removeRange(scope string, lo, hi uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, ok := r.layers[scope]
	if !ok {
		return
	}
	l.sections = l.sections.removeRange(lo, hi)
	l.variables = l.variables.removeRange(lo, hi)
	r.dropIfEmptyLocked(scope)
}
