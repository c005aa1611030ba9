package kernel

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
)

// WaterfallFunc is a waterfall listener. It receives the event and next, which runs the rest of
// the chain (with the context it is given) and finally the dispatcher's default. Not calling next
// short-circuits the chain: the listener's return value is the result.
type WaterfallFunc[In, Out any] func(ctx context.Context, in In, next func(context.Context) (Out, error)) (Out, error)

// Waterfall is a middleware chain (KRN-4): the first registered listener is outermost, Prepend
// puts a listener first, and the innermost next is the default. Safe for concurrent use; a
// dispatch sees the listeners registered when it started.
type Waterfall[In, Out any] struct {
	name string
	def  func(context.Context, In) (Out, error)
	ls   listeners[WaterfallFunc[In, Out]]
}

// NewWaterfall returns a waterfall whose innermost next is def.
func NewWaterfall[In, Out any](name string, def func(context.Context, In) (Out, error)) *Waterfall[In, Out] {
	return &Waterfall[In, Out]{name: name, def: def}
}

// Name returns the event name.
func (w *Waterfall[In, Out]) Name() string { return w.name }

// On registers a listener and returns its disposer.
func (w *Waterfall[In, Out]) On(fn WaterfallFunc[In, Out], opts ...Option) Disposer {
	return w.ls.add(fn, opts)
}

// Len returns the number of registered listeners.
func (w *Waterfall[In, Out]) Len() int { return len(w.ls.load()) }

// Run dispatches in through the listeners that receive scope, then the default. Listener errors
// and panics are not contained: an error is returned as is; a panic propagates to the caller.
func (w *Waterfall[In, Out]) Run(ctx context.Context, scope *Scope, in In) (Out, error) {
	ls := w.ls.load()
	if len(ls) == 0 {
		return w.def(ctx, in)
	}
	return w.step(ctx, ls, 0, scope, in)
}

func (w *Waterfall[In, Out]) step(ctx context.Context, ls []*listener[WaterfallFunc[In, Out]], i int, scope *Scope, in In) (Out, error) {
	for i < len(ls) && !ls[i].receives(scope) {
		i++
	}
	if i == len(ls) {
		return w.def(ctx, in)
	}
	return ls[i].fn(ctx, in, func(c context.Context) (Out, error) {
		return w.step(c, ls, i+1, scope, in)
	})
}

// SerialFunc is a serial listener: it returns the zero value to pass the event on.
type SerialFunc[In, Out any] func(ctx context.Context, in In) (Out, error)

// Serial runs listeners in order until one returns a non-zero value or an error (KRN-4).
type Serial[In any, Out comparable] struct {
	name string
	ls   listeners[SerialFunc[In, Out]]
}

// NewSerial returns an empty serial hook.
func NewSerial[In any, Out comparable](name string) *Serial[In, Out] {
	return &Serial[In, Out]{name: name}
}

// On registers a listener and returns its disposer.
func (s *Serial[In, Out]) On(fn SerialFunc[In, Out], opts ...Option) Disposer {
	return s.ls.add(fn, opts)
}

// Run returns the first non-zero value, or the zero value when every listener passed.
func (s *Serial[In, Out]) Run(ctx context.Context, scope *Scope, in In) (Out, error) {
	var zero Out
	for _, l := range s.ls.load() {
		if !l.receives(scope) {
			continue
		}
		out, err := l.fn(ctx, in)
		if err != nil || out != zero {
			return out, err
		}
	}
	return zero, nil
}

// EmitFunc is a notification listener.
type EmitFunc[In any] func(ctx context.Context, in In) error

// Emit is a notification event (KRN-4, KRN-7).
type Emit[In any] struct {
	name       string
	log        *slog.Logger
	unfiltered bool
	ls         listeners[EmitFunc[In]]
}

// NewEmit returns an empty notification hook that logs contained failures to log.
func NewEmit[In any](name string, log *slog.Logger) *Emit[In] {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Emit[In]{name: name, log: log}
}

// NewUnfilteredEmit returns a notification hook whose events reach every listener, scoped or
// not (the unfiltered events of REG-6).
func NewUnfilteredEmit[In any](name string, log *slog.Logger) *Emit[In] {
	e := NewEmit[In](name, log)
	e.unfiltered = true
	return e
}

// On registers a listener and returns its disposer.
func (e *Emit[In]) On(fn EmitFunc[In], opts ...Option) Disposer { return e.ls.add(fn, opts) }

// Len returns the number of registered listeners.
func (e *Emit[In]) Len() int { return len(e.ls.load()) }

// Notify calls every receiving listener in order. Each listener's error or panic is contained
// and logged (KRN-7); Notify never fails.
func (e *Emit[In]) Notify(ctx context.Context, scope *Scope, in In) {
	for _, l := range e.ls.load() {
		if e.unfiltered || l.receives(scope) {
			if err := callContained(ctx, l.fn, in); err != nil {
				e.log.ErrorContext(ctx, "kernel: listener failed", "event", e.name, "err", err)
			}
		}
	}
}

// Emit calls every receiving listener in order and stops at the first error, which it returns;
// a panicking listener counts as an error. Used where a failing listener must veto a change
// (REG-7).
func (e *Emit[In]) Emit(ctx context.Context, scope *Scope, in In) error {
	for _, l := range e.ls.load() {
		if e.unfiltered || l.receives(scope) {
			if err := callContained(ctx, l.fn, in); err != nil {
				return err
			}
		}
	}
	return nil
}

// PanicError is a recovered panic with the stack where it happened.
type PanicError struct {
	Value any
	Stack []byte
}

func (p *PanicError) Error() string { return fmt.Sprintf("panic: %v", p.Value) }

// Recover converts a recovered panic value into *PanicError (nil for nil). Use as
// `defer func() { err = kernel.Recover(recover(), err) }()`.
func Recover(v any, err error) error {
	if v == nil {
		return err
	}
	return &PanicError{Value: v, Stack: debug.Stack()}
}

func callContained[In any](ctx context.Context, fn EmitFunc[In], in In) (err error) {
	defer func() { err = Recover(recover(), err) }()
	return fn(ctx, in)
}
