package agents_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/preset"
)

// BenchmarkSessionTurn runs turns of new sessions of the load preset (cmd/loadgen's: the built-in
// tools, the mock model over real HTTP) on in-memory logs, as a replica serves them: each session
// gets its agent (Agents.Agent) and runner. first measures a session's first turn (its runner
// built, its prompt assembled, its request header logged), second the next turn of the same
// runner, as a warm session's. The difference is what a new session costs beyond a warm one.
func BenchmarkSessionTurn(b *testing.B) {
	m := mockllm.New(mockllm.Config{})
	srv := httptest.NewServer(m.Handler())
	b.Cleanup(func() { m.Close(); srv.Close() })
	u, _ := url.Parse(srv.URL)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	tools, err := agents.BuiltinTools(true)
	if err != nil {
		b.Fatal(err)
	}
	a, err := agents.New(agents.Config{Tools: tools, ModelHosts: []string{u.Host}, Logger: logger,
		Loop: agentloop.Config{Logger: logger}})
	if err != nil {
		b.Fatal(err)
	}
	p := preset.Preset{ID: uuid.New(), Version: 1, Body: preset.Body{Name: "load",
		Model: preset.Model{Provider: preset.ProviderOpenAI, Model: "mock", BaseURL: srv.URL}}}
	p.Body.Normalize()
	for _, script := range []string{"text", "tools:16", "steps:20"} {
		for _, second := range []bool{false, true} {
			name := script + "/first"
			if second {
				name = script + "/second"
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				var cpu time.Duration
				for b.Loop() {
					if second {
						b.StopTimer()
					}
					t0 := cpuTime()
					cfg, release, err := a.Agent(agents.Session{ID: uuid.New(), Preset: p})
					if err != nil {
						b.Fatal(err)
					}
					j := eventlog.NewMemJournal(nil)
					r := agentloop.NewRunner(cfg, j)
					serveOne(b, r, j, script)
					if second {
						b.StartTimer()
						t0 = cpuTime()
						serveOne(b, r, j, script)
					}
					cpu += cpuTime() - t0
					release()
				}
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// cpuTime returns the CPU time this process has used (user and system, all threads: the mock
// model's included): a measure less disturbed than wall time by other processes of a shared machine.
func cpuTime() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// serveOne posts script to the log of j and serves it with r.
func serveOne(b *testing.B, r *agentloop.Runner, j *eventlog.MemJournal, script string) {
	ctx := context.Background()
	msg := llm.NewUserMessage(uuid.NewString(), script)
	if _, err := j.Append(ctx, func(h eventlog.Head) ([]eventlog.NewEvent, error) {
		return []eventlog.NewEvent{eventlog.Of(eventlog.Insertion(eventlog.InboxNextTurn, h.Inbox.NextTurn, msg))}, nil
	}); err != nil {
		b.Fatal(err)
	}
	reasons, err := r.Serve(ctx)
	if err != nil || len(reasons) != 1 || reasons[0].Kind != eventlog.EndCompleted {
		b.Fatalf("%+v %v", reasons, err)
	}
}
