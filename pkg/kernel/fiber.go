package kernel

import (
	"errors"
	"fmt"
	"sync"
)

// CodeInactiveEffect is the code of an effect or listener registered on a disposed fiber (KRN-3).
const CodeInactiveEffect = "INACTIVE_EFFECT"

// ErrInactiveEffect is matched (errors.Is) by every INACTIVE_EFFECT error.
var ErrInactiveEffect = errors.New("kernel: " + CodeInactiveEffect)

// Error is a kernel failure with a machine code (the CordisError of docs/rules.md).
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return "kernel: " + e.Message }

// Is makes errors.Is(err, ErrInactiveEffect) true for INACTIVE_EFFECT errors.
func (e *Error) Is(target error) bool {
	return target == ErrInactiveEffect && e.Code == CodeInactiveEffect
}

func inactive(f *Fiber) error {
	return &Error{Code: CodeInactiveEffect, Message: fmt.Sprintf("fiber %q is not active (%s)", f.name, CodeInactiveEffect)}
}

// Fiber is the per-plugin context: everything registered through it (services, listeners,
// effects, registry entries) is undone, in reverse order, when it is disposed (KRN-3, KRN-5).
// A fiber carries a scope: its registrations are filed in that scope. Safe for concurrent use.
type Fiber struct {
	k     *Kernel
	name  string
	scope *Scope

	mu        sync.Mutex
	disposed  bool
	disposers []Disposer
}

// Name returns the fiber's (plugin's) name.
func (f *Fiber) Name() string { return f.name }

// Scope returns the scope the fiber registers in; nil is the global scope.
func (f *Fiber) Scope() *Scope { return f.scope }

// Kernel returns the kernel the fiber belongs to.
func (f *Fiber) Kernel() *Kernel { return f.k }

// Active reports whether the fiber has not been disposed.
func (f *Fiber) Active() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.disposed
}

// Track adds d to the disposers run when the fiber is disposed. On a disposed fiber, d runs at
// once and Track returns an INACTIVE_EFFECT error.
func (f *Fiber) Track(d Disposer) error {
	f.mu.Lock()
	if f.disposed {
		f.mu.Unlock()
		d()
		return inactive(f)
	}
	f.disposers = append(f.disposers, d)
	f.mu.Unlock()
	return nil
}

// Effect runs setup at once (KRN-3). setup registers its undo steps with add. The returned
// disposer runs them in reverse order, once; it also runs when the fiber is disposed. If setup
// fails, the steps it already added are run in reverse order and the error is returned. A panic
// in setup is treated as a failure.
func (f *Fiber) Effect(setup func(add func(Disposer)) error) (Disposer, error) {
	if !f.Active() {
		return nil, inactive(f)
	}
	var steps []Disposer
	undo := func() {
		for i := len(steps) - 1; i >= 0; i-- {
			steps[i]()
		}
	}
	err := func() (err error) {
		defer func() { err = Recover(recover(), err) }()
		return setup(func(d Disposer) { steps = append(steps, d) })
	}()
	if err != nil {
		undo()
		return nil, err
	}
	d := Once(undo)
	if err := f.Track(d); err != nil {
		return nil, err
	}
	return d, nil
}

// Provide registers a service under name in the fiber's scope (KRN-1). A name already provided
// in the same scope is an error. The service is removed when the fiber is disposed.
func (f *Fiber) Provide(name string, v any) (Disposer, error) {
	if !f.Active() {
		return nil, inactive(f)
	}
	d, err := f.k.provide(f.scope, name, v)
	if err != nil {
		return nil, err
	}
	if err := f.Track(d); err != nil {
		return nil, err
	}
	return d, nil
}

// Dispose undoes everything registered through the fiber in reverse order and marks it
// inactive. Calling it again does nothing.
func (f *Fiber) Dispose() {
	f.mu.Lock()
	if f.disposed {
		f.mu.Unlock()
		return
	}
	f.disposed = true
	ds := f.disposers
	f.disposers = nil
	f.mu.Unlock()
	for i := len(ds) - 1; i >= 0; i-- {
		ds[i]()
	}
}
