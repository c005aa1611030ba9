package kernel

import (
	"sync"
	"sync/atomic"
)

// Disposer undoes one registration. Calling it more than once does nothing; it is safe for
// concurrent use.
type Disposer func()

// Once wraps fn into an idempotent Disposer.
func Once(fn func()) Disposer {
	var done atomic.Bool
	return func() {
		if done.CompareAndSwap(false, true) {
			fn()
		}
	}
}

// Option adjusts a listener registration.
type Option func(*listenOpts)

type listenOpts struct {
	prepend bool
	global  bool
	scope   *Scope
	scoped  bool
}

// Prepend puts the listener before every listener registered so far (KRN-4).
func Prepend() Option { return func(o *listenOpts) { o.prepend = true } }

// InScope files the listener under scope s: it receives only events whose scope is s or a
// descendant of s (SCP-7). InScope(nil) makes it unscoped.
func InScope(s *Scope) Option { return func(o *listenOpts) { o.scope, o.scoped = s, true } }

// Global makes the listener receive every event whatever its own scope (SCP-7 `global:true`).
func Global() Option { return func(o *listenOpts) { o.global = true } }

type listener[F any] struct {
	fn     F
	scope  *Scope
	global bool
}

// receives reports whether the listener gets an event dispatched with scope ev (SCP-7): unscoped
// and global listeners get every event; a scoped one only events of its scope or a descendant.
// An event with no scope therefore reaches only unscoped and global listeners.
func (l *listener[F]) receives(ev *Scope) bool {
	if l.global || l.scope == nil {
		return true
	}
	return ev != nil && ev.Within(l.scope)
}

// listeners is a copy-on-write listener list: dispatch reads a snapshot without locking, so a
// registration or disposal during a dispatch affects only later dispatches.
type listeners[F any] struct {
	mu   sync.Mutex
	snap atomic.Pointer[[]*listener[F]]
}

func (ls *listeners[F]) load() []*listener[F] {
	if p := ls.snap.Load(); p != nil {
		return *p
	}
	return nil
}

func (ls *listeners[F]) add(fn F, opts []Option) Disposer {
	var o listenOpts
	for _, opt := range opts {
		opt(&o)
	}
	l := &listener[F]{fn: fn, scope: o.scope, global: o.global}
	ls.mu.Lock()
	old := ls.load()
	next := make([]*listener[F], 0, len(old)+1)
	if o.prepend {
		next = append(append(next, l), old...)
	} else {
		next = append(append(next, old...), l)
	}
	ls.snap.Store(&next)
	ls.mu.Unlock()
	return Once(func() { ls.remove(l) })
}

func (ls *listeners[F]) remove(l *listener[F]) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	old := ls.load()
	next := make([]*listener[F], 0, len(old))
	for _, x := range old {
		if x != l {
			next = append(next, x)
		}
	}
	ls.snap.Store(&next)
}

// Hook is anything listeners of type F can be registered on (Waterfall, Serial, Emit).
type Hook[F any] interface {
	On(fn F, opts ...Option) Disposer
}

// Listen registers fn on h as an effect of fiber f: the listener is filed under f's scope (SCP-7;
// a later InScope or Global option overrides that) and removed when f is disposed (KRN-5). On a
// disposed fiber it registers nothing and returns an INACTIVE_EFFECT error.
func Listen[F any](f *Fiber, h Hook[F], fn F, opts ...Option) (Disposer, error) {
	if !f.Active() {
		return nil, inactive(f)
	}
	all := append([]Option{InScope(f.Scope())}, opts...)
	d := h.On(fn, all...)
	if err := f.Track(d); err != nil {
		return nil, err
	}
	return d, nil
}
