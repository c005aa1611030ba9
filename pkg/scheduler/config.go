package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/dshd/dshd/pkg/registry"
)

// DefaultMaxParallelToolCalls is the pool cap used when Config.MaxParallelToolCallsFunc is nil
// (SCHED-2).
const DefaultMaxParallelToolCalls = 10

// ErrInvalidMaxParallel is wrapped by the internal failure RunStep returns when the cap read for a
// parallel group is below 1.
var ErrInvalidMaxParallel = errors.New("maxParallelToolCalls must be an integer >= 1")

// ErrPipelineContract is wrapped by the internal failure RunStep returns when the pipeline breaks
// its contract (a nil Prepared, Settled or Result).
var ErrPipelineContract = errors.New("pipeline contract violated")

// Config configures a Scheduler. The zero value is valid: every field has a documented default.
type Config struct {
	// MaxParallelToolCallsFunc returns the cap of the rolling pool of parallel calls
	// (maxParallelToolCalls). It is called once at the start of every parallel group, so a settings
	// change takes effect on the next group. It must return an integer >= 1; 1 makes every call
	// serial. A value below 1 is an internal failure wrapping ErrInvalidMaxParallel.
	// Default (nil): a constant DefaultMaxParallelToolCalls (10).
	MaxParallelToolCallsFunc func() int

	// GroupFunc, when set, is called on the lane as each group begins (SCHED-2), before its first
	// call's `tool/call`, with the inputs of the calls the group is expected to hold, in model
	// order: the one call of an exclusive group, or the consecutive calls from the first of a
	// parallel group that classify parallel (classified ahead; each is classified again just
	// before it starts, as SCHED-2 says, and that classification decides). The function it
	// returns, when not nil, is applied to the ctx of every Prepare of the group's calls, so that
	// the pipeline's prepare stage can find what the group began with (pkg/policy: the one
	// pre-execute webhook request of extension E5). It must not block; the ctx it is given is
	// the step signal. Default (nil): nothing.
	GroupFunc func(ctx context.Context, calls []registry.Input) func(context.Context) context.Context

	// Logger receives panics recovered from pipeline stages (with their stacks) and other
	// contained failures. Default (nil): slog.Default() at the time New is called.
	Logger *slog.Logger
}

// withDefaults returns cfg with every unset field replaced by its default.
func (cfg Config) withDefaults() Config {
	if cfg.MaxParallelToolCallsFunc == nil {
		cfg.MaxParallelToolCallsFunc = func() int { return DefaultMaxParallelToolCalls }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// maxParallel reads the cap for one parallel group.
func (cfg Config) maxParallel() (int, error) {
	n := cfg.MaxParallelToolCallsFunc()
	if n < 1 {
		return 0, fmt.Errorf("scheduler: %w (got %d)", ErrInvalidMaxParallel, n)
	}
	return n, nil
}
