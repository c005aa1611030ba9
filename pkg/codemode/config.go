package codemode

import (
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/dshd/dshd/pkg/telemetry"
)

// Config configures a Runtime. The zero value is valid: every field has the documented default.
type Config struct {
	// Language is the language programs are written in; only "typescript" (the default) has a
	// runtime. Any other value makes New fail (CODE-1: an unknown language fails loudly).
	Language string

	// MemoryLimitBytes caps the engine heap of one run. An allocation past it throws an
	// "out of memory" error in the program. Default DefaultMemoryLimitBytes (64 MiB).
	MemoryLimitBytes int

	// CPUTimeout bounds the CPU time one run spends executing JavaScript: the CPU time of the
	// engine's OS thread, to which each call into JavaScript is locked (on Linux; elsewhere the
	// wall time spent in JavaScript). Time spent waiting for tools, for a slot (MaxConcurrent) or for the processor
	// (descheduled) does not count. Past it the run fails with the timeout kind, overrunning it
	// by about a millisecond at most. Default DefaultCPUTimeout (10 s).
	CPUTimeout time.Duration

	// WallTimeout bounds one run from start to end, waiting for tools included. Past it the run
	// fails with the timeout kind. Default DefaultWallTimeout (2 min). The registry's tool
	// timeout (E2) bounds run_code too, whichever is shorter.
	WallTimeout time.Duration

	// MaxOutputBytes caps what a run sends back: the bytes of its console lines (one more for
	// each line break) plus the JSON of its result. Past it the run fails with the output-limit
	// kind. Default DefaultMaxOutputBytes (64 KiB).
	MaxOutputBytes int

	// MaxToolCalls caps the binding calls of one run. The call past it fails the run (exception
	// kind) without being dispatched. Default DefaultMaxToolCalls (1000).
	MaxToolCalls int

	// MaxSourceBytes caps the size of a program's code. Default DefaultMaxSourceBytes (64 KiB).
	// esbuild parses on the goroutine's stack: long operator chains (`a=a=...`) cost a few KiB
	// of stack per level, so a larger cap raises the memory a hostile program can take.
	MaxSourceBytes int

	// MaxConcurrent bounds the programs that run JavaScript at once in this process (the
	// replica); a program holds its slot only while in JavaScript, not while it waits for tools.
	// A program past it waits for a slot in a queue that serves tenants round robin (slots.go).
	// The wait counts against the call's timeout and WallTimeout and ends with a cancel; it does
	// not count against CPUTimeout. Default (0): DefaultMaxConcurrent(), half the cores.
	MaxConcurrent int

	// Logger receives failures of the dispatch log and contained listener failures. Default
	// (nil): slog.Default() at the time New is called.
	Logger *slog.Logger

	// Metrics records every sub-call as a tool call (gen_ai_execute_tool_duration_seconds,
	// dshd_tool_errors_total: sub-calls are registry tools, so their names are as bounded as
	// the native calls'); nil records nothing.
	Metrics *telemetry.Metrics

	// threadClock returns the CPU clock of the calling goroutine's thread (cpumeter.go). Default:
	// currentThreadClock when New's probe reads it, otherwise the wall-time stand-in.
	threadClock func() threadClock
}

// Defaults of Config.
const (
	DefaultMemoryLimitBytes = 64 << 20
	DefaultCPUTimeout       = 10 * time.Second
	DefaultWallTimeout      = 2 * time.Minute
	DefaultMaxOutputBytes   = 64 << 10
	DefaultMaxToolCalls     = 1000
	DefaultMaxSourceBytes   = 64 << 10
)

// DefaultMaxConcurrent is the default of Config.MaxConcurrent: half the cores the process may use
// (GOMAXPROCS), at least 1. A program's engine keeps its goroutine, and so one of the Go
// scheduler's GOMAXPROCS processors, busy while it computes: with as many programs as cores, the
// server's own goroutines wait for a 10 ms time slice at every step of every other turn (a quiet
// tenant's text turns measured 18x slower beside 12 CPU-bound programs with 2 of 2 cores taken,
// 1.5x with 1 of 2).
func DefaultMaxConcurrent() int { return max(runtime.GOMAXPROCS(0)/2, 1) }

// LanguageTypeScript is the language of the runtime (Runtime.Language).
const LanguageTypeScript = "typescript"

// withDefaults returns cfg with every unset field replaced by its default, or an error for an
// unusable value.
func (cfg Config) withDefaults() (Config, error) {
	switch cfg.Language {
	case "":
		cfg.Language = LanguageTypeScript
	case LanguageTypeScript:
	case "python":
		return cfg, fmt.Errorf("codemode: no runtime for language %q: only %q is built", cfg.Language, LanguageTypeScript)
	default:
		return cfg, fmt.Errorf("codemode: unknown language %q (want %q)", cfg.Language, LanguageTypeScript)
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{
		{"MemoryLimitBytes", &cfg.MemoryLimitBytes, DefaultMemoryLimitBytes},
		{"MaxOutputBytes", &cfg.MaxOutputBytes, DefaultMaxOutputBytes},
		{"MaxToolCalls", &cfg.MaxToolCalls, DefaultMaxToolCalls},
		{"MaxSourceBytes", &cfg.MaxSourceBytes, DefaultMaxSourceBytes},
		{"MaxConcurrent", &cfg.MaxConcurrent, DefaultMaxConcurrent()},
	} {
		if *f.v < 0 {
			return cfg, fmt.Errorf("codemode: %s must not be negative", f.name)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"CPUTimeout", &cfg.CPUTimeout, DefaultCPUTimeout},
		{"WallTimeout", &cfg.WallTimeout, DefaultWallTimeout},
	} {
		if *f.v < 0 {
			return cfg, fmt.Errorf("codemode: %s must not be negative", f.name)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.threadClock == nil {
		cfg.threadClock = currentThreadClock
		if !threadClockWorks() {
			cfg.Logger.Warn("codemode: the thread CPU clock cannot be read; run_code's CPU budget counts wall time in JavaScript")
			cfg.threadClock = func() threadClock { return threadClock{} }
		}
	}
	return cfg, nil
}
