package codemode_test

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/codemode"
	"github.com/dshd/dshd/pkg/registry"
)

// hostileConfig keeps the hostile runs short: 300 ms of CPU, 16 MiB of heap; two program slots,
// so that an ordinary program runs beside a hostile one on any number of cores.
var hostileConfig = codemode.Config{CPUTimeout: 300 * time.Millisecond, WallTimeout: 5 * time.Second,
	MemoryLimitBytes: 16 << 20, MaxConcurrent: 2}

// hostileCases are programs that attack the sandbox, with the kind of failure they end in and a
// text its message contains. kind may list alternatives ("timeout|exception"); "ok" stands for a
// success whose output is msg (the failures listed beside it are then not checked for msg).
var hostileCases = []struct {
	name, code, kind, msg string
}{
	{"infinite loop", `for (;;) {}`, "timeout", "CPU-time limit"},
	{"infinite loop that catches", `for (;;) { try { for (;;) {} } catch (e) {} }`, "timeout", "CPU-time limit"},
	{"regex backtracking", `return /(a+)+b/.test("a".repeat(40));`, "timeout", "CPU-time limit"},
	{"microtask spin", `for (;;) await 0;`, "timeout", "CPU-time limit"},
	{"memory bomb", `const a: string[] = []; for (;;) a.push("x".repeat(1024) + a.length);`, "exception", "out of memory"},
	{"memory bomb that catches", `const a: any[] = []; for (;;) { try { a.push(new Array(1e5).fill(a.length)); } catch (e) {} }`, "timeout|exception", ""},
	{"huge string", `return "x".repeat(1 << 30).length;`, "exception", "RangeError"},
	{"deep recursion", `function f(n: number): number { return f(n + 1) + 1; } return f(0);`, "exception", "stack overflow"},
	{"deep recursion in the parser", `return eval("[".repeat(1e6) + "]".repeat(1e6));`, "exception", "stack overflow"},
	{"deep JSON", `let a: any = []; for (let i = 0; i < 1e6; i++) a = [a]; return JSON.stringify(a).length;`, "exception", ""},
	{"deep source", strings.Repeat("(", 30000) + "1" + strings.Repeat(")", 30000) + ";", "exception", "nests brackets 30000 deep"},
	{"deep blocks", strings.Repeat("{", 20000) + strings.Repeat("}", 20000), "exception", "nests brackets"},
	{"source too long", strings.Repeat(" ", 1<<20), "exception", "bytes long"},
	{"long operator chain", "let a = 0; " + strings.Repeat("a=", 30000) + "1; return a;", "ok|exception", "1"},
	{"output flood", `for (;;) console.log("flood");`, "output-limit", "printed more than"},
	{"one huge line", `console.log("x".repeat(1 << 20));`, "output-limit", "printed more than"},
	{"never settles", `await new Promise(() => {});`, "timeout", "nothing will ever settle"},
	{"ten thousand tool calls", `for (let i = 0; i < 10000; i++) await tools.echo({text: "x"});`, "exception", "more than 1000 tool calls"},
	{"ten thousand at once", `await Promise.all(Array.from({length: 10000}, () => tools.echo({text: "x"})));`, "exception", "more than 1000 tool calls"},
	{"require", `return require("fs");`, "exception", "ReferenceError: 'require' is not defined"},
	{"process", `return process.env;`, "exception", "ReferenceError: 'process' is not defined"},
	{"fetch", `return await fetch("http://127.0.0.1/");`, "exception", "ReferenceError: 'fetch' is not defined"},
	{"dynamic import", `return await import("fs");`, "exception", "could not load module"},
	{"dynamic import of a path", `return await import("/etc/passwd");`, "exception", "could not load module"},
	{"static import", `import * as os from "os"; return os;`, "exception", "SyntaxError"},
	{"host functions are gone", `return [typeof (globalThis as any).__dshd_host, typeof (globalThis as any).print, typeof (globalThis as any).std, typeof (globalThis as any).os, typeof setTimeout].join();`, "ok", "undefined,undefined,undefined,undefined,undefined"},
}

// TestHostilePrograms runs programs that attack the sandbox. Each must fail with its kind, and
// the process must stay healthy: goroutines back to the baseline and the Go heap and the
// resident set near it after a GC. The test is not parallel, so the baseline is its own; it
// skips under the race detector and with -short (the engine is ~77x slower under -race).
func TestHostilePrograms(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("hostile programs are slow under -race and -short")
	}
	fx := newFixture(t, registry.ModeCode, hostileConfig)
	fx.run(context.Background(), `return 1;`) // warm up the engine's allocator
	goroutines, heap, rss := health()
	for _, c := range hostileCases {
		res := fx.run(context.Background(), c.code)
		got := text(res.Content)
		if !endsAsExpected(res, c.kind, c.msg) {
			t.Errorf("%s: %.200q, want %s with %q", c.name, got, c.kind, c.msg)
		}
		checkHealth(t, c.name, goroutines, heap, rss)

	}
	hostile := 0
	for _, d := range fx.dispatches() {
		if strings.Contains(d, " c1:") {
			hostile++
		}
	}
	if got := hostile; got > 2*(codemode.DefaultMaxToolCalls+10)*2 {
		t.Errorf("%d code-dispatch events: the calls past the cap must not be dispatched", got)
	}
}

// endsAsExpected reports whether res is one of the outcomes kind lists (see hostileCases).
func endsAsExpected(res *registry.Result, kind, msg string) bool {
	kinds := strings.Split(kind, "|")
	okListed := slices.Contains(kinds, "ok")
	got := text(res.Content)
	for _, k := range kinds {
		switch {
		case k == "ok":
			if !res.IsError && got == msg {
				return true
			}
		case res.IsError && res.Error != nil && strings.HasPrefix(res.Error.Message, "code run failed ("+k+"): ") &&
			(okListed || strings.Contains(got, msg)):
			return true
		}
	}
	return false
}

// neighbour runs an ordinary program (one tool call) over and over on fx's runtime, as another
// session would, until finish; every run must answer "n-ok".
type neighbour struct {
	stop, done chan struct{}
	runs       int
	bad        []string
}

func startNeighbour(fx *fixture) *neighbour {
	n := &neighbour{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(n.done)
		for {
			res := fx.reg.Execute(context.Background(), fx.input("n1", `const a = await tools.echo({text: "n"}); return a + "-ok";`))
			if got := text(res.Content); res.IsError || got != "n-ok" {
				n.bad = append(n.bad, got)
			} else {
				n.runs++
			}
			select {
			case <-n.stop:
				return
			default:
			}
		}
	}()
	return n
}

// finish stops the neighbour after its current run and returns its good runs and its failures.
func (n *neighbour) finish() (int, []string) {
	close(n.stop)
	<-n.done
	return n.runs, n.bad
}

// TestHostileBesideAnotherRun runs each hostile program again while an ordinary program runs
// over and over beside it on the same runtime, as another session's would: the hostile run
// fails with its kind and every ordinary run answers right. (It checks no memory: a deep parse
// beside another run was seen to leave the resident set 60-100 MiB up for seconds.)
func TestHostileBesideAnotherRun(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("hostile programs are slow under -race and -short")
	}
	fx := newFixture(t, registry.ModeCode, hostileConfig)
	for _, c := range hostileCases {
		n := startNeighbour(fx)
		res := fx.run(context.Background(), c.code)
		runs, bad := n.finish()
		if runs == 0 || len(bad) > 0 {
			t.Errorf("%s: the ordinary program beside it ran %d times well and failed with %.200q", c.name, runs, bad)
		}
		if !endsAsExpected(res, c.kind, c.msg) {
			t.Errorf("%s: %.200q, want %s with %q", c.name, text(res.Content), c.kind, c.msg)
		}
	}
}

func TestHostileWallTime(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("hostile programs are slow under -race and -short")
	}
	fx := newFixture(t, registry.ModeCode, codemode.Config{WallTimeout: 100 * time.Millisecond})
	start := time.Now()
	res := fx.run(context.Background(), `await tools.sleep({ms: 60000});`)
	if !strings.HasPrefix(res.Error.Message, "code run failed (timeout): the program ran longer than its wall-time limit") ||
		time.Since(start) > 5*time.Second {
		t.Fatalf("%q after %v", text(res.Content), time.Since(start))
	}
}

// health reads the goroutine count, the Go heap and the resident set after a GC.
func health() (goroutines int, heap, rss uint64) {
	runtime.GC()
	debug.FreeOSMemory() // return freed memory (engine heaps, grown stacks) to the OS now
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return runtime.NumGoroutine(), ms.HeapAlloc, residentBytes()
}

func residentBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

// checkHealth waits (bounded, 5 s) for the goroutines to return to the baseline and for the Go
// heap and the resident set to come within a run's memory limit and a margin of theirs (memory
// the engine freed goes back to the OS a little later), and fails if they do not.
func checkHealth(t *testing.T, name string, goroutines int, heap, rss uint64) {
	t.Helper()
	const margin = 32 << 20
	rssBound := rss + uint64(hostileConfig.MemoryLimitBytes) + margin
	deadline := time.Now().Add(5 * time.Second)
	g, h, r := health()
	for (g > goroutines || h > heap+margin || rss != 0 && r > rssBound) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		g, h, r = health()
	}
	if g > goroutines {
		t.Errorf("%s: %d goroutines, baseline %d", name, g, goroutines)
	}
	if h > heap+margin {
		t.Errorf("%s: Go heap %d MiB, baseline %d MiB", name, h>>20, heap>>20)
	}
	if rss != 0 && r > rssBound {
		t.Errorf("%s: resident set %d MiB, baseline %d MiB", name, r>>20, rss>>20)
	}
}
