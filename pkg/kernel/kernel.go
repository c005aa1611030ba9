// Package kernel is dshd's plugin kernel (docs/rules.md KRN-1..7, extension E4): typed hooks with
// waterfall, serial and emit dispatch, scoped listeners (SCP-7), idempotent disposers, and
// plugins composed statically at boot in dependency order with rollback on failure. There is no
// hot reload.
package kernel

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
)

// Plugin is a unit of composition. Apply registers everything through the fiber it is given; if
// it fails, all of that is undone in reverse order. Deps names the services that must be
// provided (visible from Scope) before Apply runs.
type Plugin struct {
	Name  string
	Scope *Scope
	Deps  []string
	Apply func(ctx context.Context, f *Fiber) error
}

type serviceKey struct {
	scope *Scope
	name  string
}

// Kernel holds the scope tree, the services and the loaded plugin fibers. Safe for concurrent
// use.
type Kernel struct {
	log    *slog.Logger
	scopes *ScopeTree

	mu       sync.RWMutex
	services map[serviceKey]any
	loaded   []*Fiber
}

// New returns an empty kernel. A nil log discards.
func New(log *slog.Logger) *Kernel {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Kernel{log: log, scopes: NewScopeTree(), services: map[serviceKey]any{}}
}

// Log returns the kernel's logger.
func (k *Kernel) Log() *slog.Logger { return k.log }

// Scopes returns the kernel's scope tree.
func (k *Kernel) Scopes() *ScopeTree { return k.scopes }

// Fiber returns a new active fiber in scope that is not a loaded plugin: an overlay the caller
// disposes itself (per-tenant or per-preset registrations, tests).
func (k *Kernel) Fiber(name string, scope *Scope) *Fiber {
	return &Fiber{k: k, name: name, scope: scope}
}

func (k *Kernel) provide(scope *Scope, name string, v any) (Disposer, error) {
	key := serviceKey{scope, name}
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.services[key]; ok {
		return nil, fmt.Errorf("kernel: service %q is already provided in scope %q", name, scope.Key())
	}
	k.services[key] = v
	return Once(func() {
		k.mu.Lock()
		delete(k.services, key)
		k.mu.Unlock()
	}), nil
}

// Service returns the service name as seen from scope: the nearest scope on the chain that
// provides it wins, then the global scope.
func (k *Kernel) Service(name string, scope *Scope) (any, bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	for s := scope; s != nil; s = s.parent {
		if v, ok := k.services[serviceKey{s, name}]; ok {
			return v, true
		}
	}
	v, ok := k.services[serviceKey{nil, name}]
	return v, ok
}

// Get returns the service name seen from scope as a T.
func Get[T any](k *Kernel, name string, scope *Scope) (T, bool) {
	v, ok := k.Service(name, scope)
	t, isT := v.(T)
	return t, ok && isT
}

// Load applies plugins in dependency order: repeatedly the first pending plugin whose
// dependencies are all provided. A plugin whose Apply fails (or panics) is rolled back and Load
// returns its error; plugins loaded before it stay loaded. A dependency no plugin provides is an
// error naming the plugin and the missing services.
func (k *Kernel) Load(ctx context.Context, plugins ...Plugin) error {
	pending := append([]Plugin(nil), plugins...)
	for len(pending) > 0 {
		i := k.ready(pending)
		if i < 0 {
			return k.missing(pending)
		}
		p := pending[i]
		pending = append(pending[:i], pending[i+1:]...)
		if err := k.apply(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

func (k *Kernel) ready(pending []Plugin) int {
	for i, p := range pending {
		ok := true
		for _, d := range p.Deps {
			if _, has := k.Service(d, p.Scope); !has {
				ok = false
				break
			}
		}
		if ok {
			return i
		}
	}
	return -1
}

func (k *Kernel) missing(pending []Plugin) error {
	var parts []string
	for _, p := range pending {
		var miss []string
		for _, d := range p.Deps {
			if _, has := k.Service(d, p.Scope); !has {
				miss = append(miss, fmt.Sprintf("%q", d))
			}
		}
		sort.Strings(miss)
		parts = append(parts, fmt.Sprintf("plugin %q is missing dependencies %s", p.Name, strings.Join(miss, ", ")))
	}
	return fmt.Errorf("kernel: %s (no plugin provides them)", strings.Join(parts, "; "))
}

func (k *Kernel) apply(ctx context.Context, p Plugin) error {
	f := k.Fiber(p.Name, p.Scope)
	err := func() (err error) {
		defer func() { err = Recover(recover(), err) }()
		if p.Apply == nil {
			return nil
		}
		return p.Apply(ctx, f)
	}()
	if err != nil {
		f.Dispose()
		return fmt.Errorf("kernel: plugin %q failed to load: %w", p.Name, err)
	}
	k.mu.Lock()
	k.loaded = append(k.loaded, f)
	k.mu.Unlock()
	return nil
}

// Close disposes every loaded plugin in reverse load order. Safe to call more than once.
func (k *Kernel) Close() {
	k.mu.Lock()
	fs := k.loaded
	k.loaded = nil
	k.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i].Dispose()
	}
}
