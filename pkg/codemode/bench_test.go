package codemode_test

import (
	"context"
	"encoding/json"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/codemode"
	"github.com/dshd/dshd/pkg/registry"
)

// go test ./pkg/codemode -run '^$' -bench . -benchmem

func benchFixture(b *testing.B) *fixture {
	return newFixture(b, registry.ModeCode, codemode.Config{})
}

func benchInput(code string, log registry.Recorder) registry.Input {
	args, _ := json.Marshal(map[string]string{"code": code, "description": "Benchmark"})
	in := registry.Input{CallID: "c1", Name: registry.RunCodeName, Args: args, Scope: agentScope}
	if log != nil {
		in.Agent, in.Log = "s1", log
	}
	return in
}

func runBench(b *testing.B, fx *fixture, in registry.Input) {
	b.Helper()
	cpu0 := processCPU()
	for b.Loop() {
		if res := fx.reg.Execute(context.Background(), in); res.IsError {
			b.Fatal(text(res.Content))
		}
	}
	reportCPU(b, cpu0)
}

// processCPU is the CPU time (user and system) the process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process CPU time per op since cpu0, every goroutine of the run included:
// on a shared machine it varies less than the wall time, which counts the time the process
// waited for a processor.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkRunCodeStartup is one run_code call of `return 1` through the registry: strip, a
// fresh engine, the prelude, the program, rendering.
func BenchmarkRunCodeStartup(b *testing.B) {
	fx := benchFixture(b)
	runBench(b, fx, benchInput(`return 1;`, nil))
}

// BenchmarkProgram100Calls is a program awaiting echo 100 times, with the code-dispatch events
// written to a MemJournal; compare (its time - startup) / 100 with BenchmarkNativeEcho.
func BenchmarkProgram100Calls(b *testing.B) {
	fx := benchFixture(b)
	runBench(b, fx, benchInput(`for (let i = 0; i < 100; i++) await tools.echo({text: "x"});`, fx.rec))
}

// BenchmarkProgram100CallsNoLog is BenchmarkProgram100Calls for a call with no agent: no
// code-dispatch events.
func BenchmarkProgram100CallsNoLog(b *testing.B) {
	fx := benchFixture(b)
	runBench(b, fx, benchInput(`for (let i = 0; i < 100; i++) await tools.echo({text: "x"});`, nil))
}

// BenchmarkProgram100ParallelCalls starts the 100 echo calls together (Promise.all).
func BenchmarkProgram100ParallelCalls(b *testing.B) {
	fx := benchFixture(b)
	runBench(b, fx, benchInput(`await Promise.all(Array.from({length: 100}, () => tools.echo({text: "x"})));`, fx.rec))
}

// BenchmarkNativeEcho is one native echo call through the registry pipeline.
func BenchmarkNativeEcho(b *testing.B) {
	fx := newFixture(b, registry.ModeNative, codemode.Config{})
	in := registry.Input{CallID: "c1", Name: "echo", Args: json.RawMessage(`{"text":"x"}`)}
	runBench(b, fx, in)
}

// BenchmarkConcurrent50 runs 50 programs at once, each making 10 echo calls; one op is the batch.
func BenchmarkConcurrent50(b *testing.B) {
	fx := benchFixture(b)
	in := benchInput(`let s = ""; for (let i = 0; i < 10; i++) s += await tools.echo({text: "x"}); return s;`, nil)
	for b.Loop() {
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				if res := fx.reg.Execute(context.Background(), in); res.IsError {
					b.Error(text(res.Content))
				}
			})
		}
		wg.Wait()
	}
}

// BenchmarkMemoryPerRun holds 50 runs open at once (each waits in a tool call) and reports the
// resident set and Go heap they add, per run.
func BenchmarkMemoryPerRun(b *testing.B) {
	const n = 50
	g := newGate()
	fx := newFixture(b, registry.ModeCode, codemode.Config{}, g.tool(b, "hold", true))
	in := benchInput(`const data = Array.from({length: 1000}, (_, i) => ({i, s: "item " + i}));
		return (await tools.hold({text: "x"})) + data.length;`, nil)
	var rssPer, heapPer float64
	for b.Loop() {
		_, heap0, rss0 := health()
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() { fx.reg.Execute(context.Background(), in) })
		}
		for range n {
			<-g.started
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		rss := residentBytes()
		rssPer = float64(rss-rss0) / n / (1 << 20)
		heapPer = float64(int64(ms.HeapAlloc)-int64(heap0)) / n / (1 << 20)
		for range n {
			g.release <- struct{}{}
		}
		wg.Wait()
	}
	b.ReportMetric(rssPer, "rss-MiB/run")
	b.ReportMetric(heapPer, "goheap-MiB/run")
}
