package agentloop

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/llm/openai"
)

// benchTurns runs one `steps:20` turn per iteration in process, on a fresh in-memory log: the
// baseline the HTTP/SSE path with a durable log is compared with (cmd/loadgen).
func benchTurns(b *testing.B, p llm.Provider) {
	t := &testing.T{}
	h := newHarness(t, p)
	h.cfg.Model = llm.Config{Provider: "openai", Model: "mock"}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		h.j = eventlog.NewMemJournal(nil)
		h.post(eventlog.InboxNextTurn, "tools:1 steps:20")
		reasons, err := NewRunner(h.cfg, h.j).Serve(context.Background())
		if err != nil || len(reasons) != 1 || reasons[0].Kind != eventlog.EndCompleted {
			b.Fatalf("%+v %v", reasons, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/21, "µs/step")
}

// BenchmarkTurnSteps20MockHTTP: the plain in-process loop against cmd/mockllm over real HTTP.
func BenchmarkTurnSteps20MockHTTP(b *testing.B) {
	m := mockllm.New(mockllm.Config{})
	srv := httptest.NewServer(m.Handler())
	b.Cleanup(func() { m.Close(); srv.Close() })
	benchTurns(b, openai.New(openai.Config{BaseURL: srv.URL, Model: "mock"}))
}

// BenchmarkTurnSteps20Scripted: the same with the in-process scripted model (no HTTP at all).
func BenchmarkTurnSteps20Scripted(b *testing.B) {
	benchTurns(b, nil)
}
