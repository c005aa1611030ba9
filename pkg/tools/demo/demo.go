// Package demo is a harmless tool pack for tests, benchmarks and the offline first run
// (DSHD_DEMO_TOOLS=1): `echo` returns its text and may run in parallel; `sleep` waits, honouring
// cancellation, then returns its text, and runs alone; `wait` does the same in parallel; `fail`
// always fails with a plain error (no code) whose message is its text.
package demo

import (
	"context"
	"errors"
	"time"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/registry"
)

// MaxSleepMs bounds the `sleep` tool.
const MaxSleepMs = 10 * 60 * 1000

// EchoArgs are the arguments of `echo`.
type EchoArgs struct {
	Text string `json:"text" jsonschema:"required,description=The text to return."`
}

// SleepArgs are the arguments of `sleep`.
type SleepArgs struct {
	Ms   int    `json:"ms" jsonschema:"required,description=How long to wait in milliseconds."`
	Text string `json:"text,omitempty" jsonschema:"description=The text to return after waiting."`
}

// FailArgs are the arguments of `fail`.
type FailArgs struct {
	Text string `json:"text" jsonschema:"required,description=The error message."`
}

// Tools returns fresh definitions of `echo`, `sleep`, `wait` and `fail`.
func Tools() ([]*registry.Tool, error) {
	echo, err := registry.Define(registry.DefineSpec[EchoArgs, string]{
		Name:            "echo",
		Description:     "Return the given text unchanged.",
		ConcurrencySafe: true,
	}, func(_ context.Context, _ *registry.Execution, a EchoArgs) (string, error) {
		return a.Text, nil
	})
	if err != nil {
		return nil, err
	}
	sleep, err := registry.Define(registry.DefineSpec[SleepArgs, string]{
		Name:        "sleep",
		Description: "Wait for the given number of milliseconds, then return the given text.",
	}, wait)
	if err != nil {
		return nil, err
	}
	waitTool, err := registry.Define(registry.DefineSpec[SleepArgs, string]{
		Name:            "wait",
		Description:     "Wait for the given number of milliseconds, then return the given text; calls may run in parallel.",
		ConcurrencySafe: true,
	}, wait)
	if err != nil {
		return nil, err
	}
	fail, err := registry.Define(registry.DefineSpec[FailArgs, string]{
		Name:        "fail",
		Description: "Always fail, with the given text as the error message.",
	}, func(_ context.Context, _ *registry.Execution, a FailArgs) (string, error) {
		return "", errors.New(a.Text)
	})
	if err != nil {
		return nil, err
	}
	return []*registry.Tool{echo, sleep, waitTool, fail}, nil
}

// wait is the body of `sleep` and `wait`.
func wait(ctx context.Context, _ *registry.Execution, a SleepArgs) (string, error) {
	if a.Ms < 0 || a.Ms > MaxSleepMs {
		return "", registry.NewError("ToolArgsError", fault.CodeInvalidArgs,
			"invalid arguments: \"ms\" must be between 0 and %d", MaxSleepMs)
	}
	t := time.NewTimer(time.Duration(a.Ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return a.Text, nil
	case <-ctx.Done():
		return "", registry.NewError("AbortError", fault.CodeAborted, "tool call aborted")
	}
}
