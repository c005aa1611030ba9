package scheduler

import (
	"errors"
	"fmt"
	"log/slog"
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
