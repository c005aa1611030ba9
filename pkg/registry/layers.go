package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dshd/dshd/pkg/kernel"
)

// Lock order: Registry.mu is a leaf lock; no hook is dispatched while it is held.

// layer holds one scope's registrations (KRN-6). The global layer is created eagerly; scoped
// layers on demand, and are reclaimed when empty.
type layer struct {
	tools        map[string]*entry
	restrictions []*restriction
	mode         *PresentMode
	guards       []*guard
}

func (l *layer) empty() bool {
	return len(l.tools) == 0 && len(l.restrictions) == 0 && l.mode == nil && len(l.guards) == 0
}

// Restriction filters the tools a scope inherits (SCP-3, SCP-4). Allow nil and Deny nil
// together are rejected; an empty non-nil Allow hides every inherited tool.
type Restriction struct {
	Allow []string
	Deny  []string
}

type restriction struct {
	allow map[string]bool // nil = no allow list
	deny  map[string]bool
}

func (rs *restriction) permits(name string) bool {
	if rs.allow != nil && !rs.allow[name] {
		return false
	}
	return !rs.deny[name]
}

var errUnscoped = errors.New("requires a scoped context")

// active rejects registrations through a disposed fiber (INACTIVE_EFFECT, KRN-3).
func active(f *kernel.Fiber) error {
	if f.Active() {
		return nil
	}
	return &kernel.Error{Code: kernel.CodeInactiveEffect, Message: fmt.Sprintf("registration through disposed fiber %q (%s)", f.Name(), kernel.CodeInactiveEffect)}
}

// layerLocked returns the layer of scope, creating it. Callers hold r.mu.
func (r *Registry) layerLocked(scope *kernel.Scope) *layer {
	l := r.layers[scope]
	if l == nil {
		l = &layer{}
		r.layers[scope] = l
	}
	return l
}

// reclaimLocked drops an empty scoped layer. Callers hold r.mu.
func (r *Registry) reclaimLocked(scope *kernel.Scope) {
	if l := r.layers[scope]; scope != nil && l != nil && l.empty() {
		delete(r.layers, scope)
	}
}

// commitChange emits the change; a failing listener undoes the change and the error propagates
// (REG-7). On success the returned disposer undoes the change and emits undoKind, and is
// tracked by f (REG-8).
func (r *Registry) commitChange(f *kernel.Fiber, ch Change, undo func(), undoKind string) (kernel.Disposer, error) {
	if err := r.Hooks.Change.Emit(context.Background(), nil, ch); err != nil {
		undo()
		return nil, fmt.Errorf("registry: tools/change listener failed, %s rolled back: %w", ch.Kind, err)
	}
	d := kernel.Once(func() {
		undo()
		r.Hooks.Change.Notify(context.Background(), nil, Change{Kind: undoKind, Name: ch.Name, Scope: ch.Scope})
	})
	if err := f.Track(d); err != nil {
		return nil, err
	}
	return d, nil
}

// Register files t in f's layer: the global layer for an unscoped fiber, the scope's own layer
// otherwise (REG-1). It applies the REG-2 checks and returns an idempotent disposer, also run
// when f is disposed.
func (r *Registry) Register(f *kernel.Fiber, t *Tool) (kernel.Disposer, error) {
	if err := active(f); err != nil {
		return nil, err
	}
	e, err := checkTool(t, false)
	if err != nil {
		return nil, err
	}
	scope := f.Scope()
	r.mu.Lock()
	l := r.layerLocked(scope)
	if _, dup := l.tools[e.Name]; dup {
		r.reclaimLocked(scope)
		r.mu.Unlock()
		if scope == nil {
			return nil, fmt.Errorf("registry: tool %q is already registered in the global layer; register it through an agent's context to give that agent its own version", e.Name)
		}
		return nil, fmt.Errorf("registry: tool %q is already registered in scope %q", e.Name, scope.Key())
	}
	if l.tools == nil {
		l.tools = map[string]*entry{}
	}
	l.tools[e.Name] = e
	r.mu.Unlock()
	undo := func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if l := r.layers[scope]; l != nil && l.tools[e.Name] == e {
			delete(l.tools, e.Name)
			r.reclaimLocked(scope)
		}
	}
	return r.commitChange(f, Change{Kind: "register", Name: e.Name, Scope: scope.Key()}, undo, "unregister")
}

// InstallRunCode installs the reserved run_code tool (CODE-1), visible to scopes whose
// effective mode is not native (REG-5). Only one can be installed at a time.
func (r *Registry) InstallRunCode(f *kernel.Fiber, t *Tool) (kernel.Disposer, error) {
	if err := active(f); err != nil {
		return nil, err
	}
	e, err := checkTool(t, true)
	if err != nil {
		return nil, err
	}
	if e.Name != RunCodeName {
		return nil, fmt.Errorf("registry: InstallRunCode needs a tool named %q", RunCodeName)
	}
	r.mu.Lock()
	if r.runCode != nil {
		r.mu.Unlock()
		return nil, fmt.Errorf("registry: %q is already installed", RunCodeName)
	}
	r.runCode = e
	r.mu.Unlock()
	undo := func() {
		r.mu.Lock()
		if r.runCode == e {
			r.runCode = nil
		}
		r.mu.Unlock()
	}
	return r.commitChange(f, Change{Kind: "register", Name: RunCodeName}, undo, "unregister")
}

// Restrict filters the tools f's scope inherits (SCP-3..SCP-5). It needs a scoped fiber, at
// least one list, no run_code, and names that are currently inherited tools.
func (r *Registry) Restrict(f *kernel.Fiber, rs Restriction) (kernel.Disposer, error) {
	if err := active(f); err != nil {
		return nil, err
	}
	scope := f.Scope()
	switch {
	case scope == nil:
		return nil, fmt.Errorf("registry: restrict %w", errUnscoped)
	case rs.Allow == nil && rs.Deny == nil:
		return nil, fmt.Errorf("registry: restrict needs allow or deny")
	}
	compiled := &restriction{deny: map[string]bool{}}
	if rs.Allow != nil {
		compiled.allow = map[string]bool{}
	}
	r.mu.Lock()
	known := r.inheritedNamesLocked(scope)
	var unknown []string
	for _, lst := range [][]string{rs.Allow, rs.Deny} {
		for _, n := range lst {
			if n == RunCodeName {
				r.mu.Unlock()
				return nil, fmt.Errorf("registry: restrict cannot name %q", RunCodeName)
			}
			if _, ok := slices.BinarySearch(known, n); !ok {
				unknown = append(unknown, n)
			}
		}
	}
	if len(unknown) > 0 {
		r.mu.Unlock()
		k := strings.Join(known, ", ")
		if k == "" {
			k = "(none)"
		}
		return nil, fmt.Errorf("registry: restrict names tools that are not inherited by scope %q: %s; known tools: %s", scope.Key(), quotedNames(unknown), k)
	}
	for _, n := range rs.Allow {
		compiled.allow[n] = true
	}
	for _, n := range rs.Deny {
		compiled.deny[n] = true
	}
	l := r.layerLocked(scope)
	l.restrictions = append(l.restrictions, compiled)
	r.mu.Unlock()
	undo := func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if l := r.layers[scope]; l != nil {
			l.restrictions = slices.DeleteFunc(l.restrictions, func(x *restriction) bool { return x == compiled })
			r.reclaimLocked(scope)
		}
	}
	return r.commitChange(f, Change{Kind: "restrict", Scope: scope.Key()}, undo, "unrestrict")
}

// quotedNames lists names in an error message: at most the first 10, each quoted and clipped to
// 64 bytes, then how many more there are. A restriction's names come from presets: its error is
// logged and ends every turn of the preset.
func quotedNames(names []string) string {
	const most, clip = 10, 64
	n := min(len(names), most)
	parts := make([]string, n, n+1)
	for i, name := range names[:n] {
		if len(name) > clip {
			cut := clip
			for cut > 0 && !utf8.RuneStart(name[cut]) {
				cut--
			}
			name = name[:cut] + "…"
		}
		parts[i] = strconv.Quote(name)
	}
	if len(names) > n {
		parts = append(parts, fmt.Sprintf("and %d more", len(names)-n))
	}
	return strings.Join(parts, ", ")
}

// inheritedNamesLocked lists, sorted, the tools scope inherits before restrictions: global and
// ancestor tools that are not the scope's own.
func (r *Registry) inheritedNamesLocked(scope *kernel.Scope) []string {
	seen := map[string]bool{}
	for s := scope.Parent(); ; s = s.Parent() {
		if l := r.layers[s]; l != nil {
			for n := range l.tools {
				seen[n] = true
			}
		}
		if s == nil {
			break
		}
	}
	if own := r.layers[scope]; own != nil {
		for n := range own.tools {
			delete(seen, n)
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// PresentAs declares f's scope's presentation mode (PRS-2). It needs a scoped fiber and at most
// one declaration per scope; disposing it restores the inherited or default mode.
func (r *Registry) PresentAs(f *kernel.Fiber, mode PresentMode) (kernel.Disposer, error) {
	if err := active(f); err != nil {
		return nil, err
	}
	scope := f.Scope()
	if scope == nil {
		return nil, fmt.Errorf("registry: presentAs %w", errUnscoped)
	}
	if !mode.valid() {
		return nil, fmt.Errorf("registry: presentAs: mode must be native, code or both, not %q", mode)
	}
	m := &mode
	r.mu.Lock()
	l := r.layerLocked(scope)
	if l.mode != nil {
		r.mu.Unlock()
		return nil, fmt.Errorf("registry: presentAs already declared for scope %q", scope.Key())
	}
	l.mode = m
	r.mu.Unlock()
	undo := func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if l := r.layers[scope]; l != nil && l.mode == m {
			l.mode = nil
			r.reclaimLocked(scope)
		}
	}
	return r.commitChange(f, Change{Kind: "present-as", Scope: scope.Key()}, undo, "present-as-removed")
}
