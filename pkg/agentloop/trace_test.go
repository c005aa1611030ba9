package agentloop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/telemetry"
)

// switchSampler samples a root span while on is set, and drops it otherwise.
type switchSampler struct{ on atomic.Bool }

func (s *switchSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	d := sdktrace.Drop
	if s.on.Load() {
		d = sdktrace.RecordAndSample
	}
	return sdktrace.SamplingResult{Decision: d}
}

func (s *switchSampler) Description() string { return "switch" }

// syncBuffer is a log sink for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// turnEndedLines returns the "turn ended" log lines, decoded.
func (l *syncBuffer) turnEndedLines() []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "turn ended" {
			out = append(out, m)
		}
	}
	return out
}

// TestTraceIDsOnlyOfSampledTurns: a sampled turn's trace id is on its turn/start, its log lines
// and the runner's SpanContext (the worker's lines); a turn that was not sampled leaves its trace
// id nowhere (it would lead to no trace), and not the previous turn's either. A call of a tool the
// registry does not know has the span name the metrics give it: "execute_tool unknown".
func TestTraceIDsOnlyOfSampledTurns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	sampler := &switchSampler{}
	sampler.on.Store(true)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(rec))
	h.cfg.Tracer = telemetry.Tracer(tp)
	logs := &syncBuffer{}
	h.cfg.Logger = slog.New(telemetry.LogHandler(slog.NewJSONHandler(logs, nil)))
	r := NewRunner(h.cfg, h.j)

	h.post(eventlog.InboxNextTurn, "tool:made_up_name")
	if _, err := r.Serve(context.Background()); err != nil {
		t.Fatal(err)
	}
	sc, ok := r.SpanContext()
	traces := h.ofType(eventlog.TypeTurnTrace)
	if len(traces) != 1 || !traces[0].Ignorable || traces[0].Seq != h.ofType(eventlog.TypeTurnStart)[0].Seq+1 {
		t.Fatalf("sampled turn: turn/trace events %+v", traces)
	}
	first := decode[eventlog.TurnTrace](t, traces[0].Data)
	if !ok || first.Turn != 1 || sc.TraceID().String() != first.TraceID {
		t.Fatalf("sampled turn: SpanContext %v %v, turn/trace %+v", sc, ok, first)
	}
	names := map[string]bool{}
	for _, s := range rec.Ended() {
		names[s.Name()] = true
		if strings.Contains(s.Name(), "made_up") {
			t.Errorf("span %q is named after the model's made-up tool", s.Name())
		}
	}
	if !names["execute_tool unknown"] {
		t.Errorf("no execute_tool unknown span among %v", names)
	}

	sampler.on.Store(false)
	h.post(eventlog.InboxNextTurn, "text")
	if _, err := r.Serve(context.Background()); err != nil {
		t.Fatal(err)
	}
	starts := h.ofType(eventlog.TypeTurnStart)
	if len(starts) != 2 {
		t.Fatalf("%d turns", len(starts))
	}
	if traces := h.ofType(eventlog.TypeTurnTrace); len(traces) != 1 {
		t.Errorf("an unsampled turn has a turn/trace: %+v", traces)
	}
	if sc, ok := r.SpanContext(); ok {
		t.Errorf("after an unsampled turn SpanContext is %v (the last sampled turn's?)", sc)
	}
	lines := logs.turnEndedLines()
	if len(lines) != 2 || lines[0]["trace_id"] != first.TraceID || lines[1]["trace_id"] != nil {
		t.Errorf("turn ended lines %v: want the first with trace_id %s, the second without", lines, first.TraceID)
	}
}
