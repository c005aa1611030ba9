// Package toolctx carries what a tool body may use of the session it runs in, through the
// context the pipeline hands it: a sink for session events of the tool's own (for example
// `todo/write`). It imports only the standard library.
package toolctx

import (
	"context"
	"errors"
)

// Sink receives the session events a tool body emits. The agent loop writes the events of a call
// right before that call's `tool/result`, in emission order. Implementations are safe for
// concurrent use.
type Sink interface {
	Emit(callID, eventType string, data any) error
}

type sinkKey struct{}

// WithSink returns ctx carrying s.
func WithSink(ctx context.Context, s Sink) context.Context {
	return context.WithValue(ctx, sinkKey{}, s)
}

// ErrNoSession is returned by Emit when the call runs outside a session (no sink on ctx).
var ErrNoSession = errors.New("toolctx: the call has no session to log to")

// Emit emits a session event for the call callID through the sink on ctx.
func Emit(ctx context.Context, callID, eventType string, data any) error {
	s, ok := ctx.Value(sinkKey{}).(Sink)
	if !ok {
		return ErrNoSession
	}
	return s.Emit(callID, eventType, data)
}
