package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestBoundKeepsLabelSetsSmall: a Bound keeps its fixed list, or the first values up to its
// limit, and reports everything else, and anything unprintable or long, as "other".
func TestBoundKeepsLabelSetsSmall(t *testing.T) {
	b := NewBound(2)
	for _, c := range []struct{ in, want string }{
		{"a", "a"}, {"b", "b"}, {"c", Other}, {"a", "a"}, {"", "unknown"},
	} {
		if got := b.Of(c.in); got != c.want {
			t.Errorf("Of(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	fixed := NewBound(100, "deepseek-chat")
	if fixed.Of("deepseek-chat") != "deepseek-chat" || fixed.Of("mine") != Other {
		t.Error("a fixed list admits other values")
	}
	open := NewBound(10)
	if open.Of("bad\nvalue") != Other || open.Of(strings.Repeat("x", 65)) != Other {
		t.Error("an unprintable or long value became a label value")
	}
}

// TestNilMetricsRecordNothing: every method of a nil *Metrics is a no-op (components built
// without metrics need no guard).
func TestNilMetricsRecordNothing(t *testing.T) {
	var m *Metrics
	m.ModelCall("p", "m", "SERVER", time.Second)
	m.ModelFirstChunk("p", "m", time.Second)
	m.ModelTokens("p", "m", 1, 2)
	m.ToolCall("echo", "", time.Second)
	m.TurnEnded("completed", "", time.Second, 1)
	m.JobWait(time.Second)
	m.LeaseTakeover()
	m.CrashRepair()
	m.ApprovalWaiting(1)
	m.SSEWritten(10, 1)
	m.StreamFirstEvent(time.Second)
}

// TestModelLabelsAreTheOperators: by default only DeepSeek's models have their own label value;
// made-up names, however many and however early, read "other", and the operator's list adds
// names. A tenant cannot squat the label set.
func TestModelLabelsAreTheOperators(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, Options{})
	for i := range 100 {
		m.ModelCall("openai", "junk-"+strconv.Itoa(i), "", time.Second)
	}
	m.ModelCall("deepseek", "deepseek-chat", "", time.Second)
	m.ModelCall("deepseek", "deepseek-reasoner", "", time.Second)
	if n := modelCalls(t, reg, Other); n != 100 {
		t.Errorf("%v junk calls read other, want 100", n)
	}
	if n := testutil.CollectAndCount(m.opDuration); n != 3 {
		t.Errorf("%d duration series, want 3 (other, deepseek-chat, deepseek-reasoner)", n)
	}
	listed := NewMetrics(prometheus.NewRegistry(), Options{Models: []string{"gpt-x"}})
	if listed.models.Of("gpt-x") != "gpt-x" || listed.models.Of("deepseek-chat") != "deepseek-chat" || listed.models.Of("junk") != Other {
		t.Error("the operator's list does not add to the default models")
	}
}

// modelCalls counts the calls of gen_ai_client_operation_duration_seconds with model label mo.
func modelCalls(t *testing.T, reg *prometheus.Registry, mo string) (n uint64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "gen_ai_client_operation_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == labelModel && l.GetValue() == mo {
					n += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return n
}

// TestLogLinesOnlyOfSampledSpans: a line logged under a span that was not sampled (not exported)
// carries no trace id, which would lead nowhere.
func TestLogLinesOnlyOfSampledSpans(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	ctx, span := Tracer(tp).Start(context.Background(), "dshd.turn")
	defer span.End()
	if !span.SpanContext().IsValid() || Sampled(span) {
		t.Fatalf("span context %v: want valid and not sampled", span.SpanContext())
	}
	var buf bytes.Buffer
	slog.New(LogHandler(slog.NewJSONHandler(&buf, nil))).InfoContext(ctx, "unsampled")
	if strings.Contains(buf.String(), "trace_id") {
		t.Errorf("a line of an unsampled span has a trace id: %s", buf.String())
	}
}

// TestMetricsRecord checks a few series' values and that a model beyond the bound reads "other".
func TestMetricsRecord(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, Options{Models: []string{"known"}})
	m.ModelCall("deepseek", "known", "", time.Second)
	m.ModelCall("deepseek", "tenant-made-up", "RATE_LIMIT", time.Second)
	m.ToolCall("echo", "INVALID_ARGS", time.Millisecond)
	m.ToolCall("made_up", "UNKNOWN_TOOL", time.Millisecond)
	if n := testutil.ToFloat64(m.modelErrs.WithLabelValues("deepseek", "RATE_LIMIT")); n != 1 {
		t.Errorf("model errors %v", n)
	}
	if n := testutil.CollectAndCount(m.opDuration); n != 2 {
		t.Errorf("%d duration series, want 2", n)
	}
	if err := testutil.CollectAndCompare(m.toolErrs, strings.NewReader(`
# HELP dshd_tool_errors_total Tool calls that ended with a failure result, by tool and error code (TOOL_ERROR when the tool gave none).
# TYPE dshd_tool_errors_total counter
dshd_tool_errors_total{error_type="INVALID_ARGS",gen_ai_tool_name="echo"} 1
dshd_tool_errors_total{error_type="UNKNOWN_TOOL",gen_ai_tool_name="unknown"} 1
`)); err != nil {
		t.Error(err)
	}
	out, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range out {
		for _, mm := range mf.Metric {
			for _, l := range mm.Label {
				if l.GetValue() == "tenant-made-up" {
					t.Errorf("%s has the unlisted model as a label value", mf.GetName())
				}
			}
		}
	}
}

// TestSpansAndLogLines: StartChild does nothing without a recording parent; under a turn span
// the tool and chat spans nest, and LogHandler adds the trace and span ids to a line logged
// with the span's context.
func TestSpansAndLogLines(t *testing.T) {
	ctx := context.Background()
	if c, s := StartTool(ctx, "c1"); c != ctx || s.IsRecording() {
		t.Fatal("a span was started without a recording parent")
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, root := Tracer(tp).Start(ctx, "dshd.turn")
	cctx, chat := StartChat(ctx, "scripted", "m")
	EndChat(chat, 3, 4, "stop", "")
	_, tool := StartTool(ctx, "c1")
	EndTool(tool, "echo", true, "")
	_, made := StartTool(ctx, "c2")
	EndTool(made, "made_up_by_the_model", true, "UNKNOWN_TOOL")

	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewJSONHandler(&buf, nil))).With("session", "s")
	log.InfoContext(cctx, "in the chat")
	log.Info("no context")
	root.End()

	spans := rec.Ended()
	if len(spans) != 4 {
		t.Fatalf("%d spans", len(spans))
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byName[s.Name()] = s
	}
	rootID := root.SpanContext().SpanID()
	if byName["chat m"].Parent().SpanID() != rootID || byName["execute_tool echo"].Parent().SpanID() != rootID ||
		byName["chat m"].SpanKind() != trace.SpanKindClient {
		t.Errorf("parentage %v", spans)
	}
	var attrs = map[string]string{}
	for _, kv := range byName["execute_tool echo"].Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	if attrs["gen_ai.tool.name"] != "echo" || attrs["gen_ai.tool.call.id"] != "c1" || attrs["error.type"] != "TOOL_ERROR" {
		t.Errorf("tool span attributes %v", attrs)
	}
	// A name the registry does not know is the model's: the span is "execute_tool unknown", as
	// the metrics' label, and the made-up name is nowhere on it.
	unknown, ok := byName["execute_tool unknown"]
	if !ok {
		t.Fatalf("no execute_tool unknown span in %v", spans)
	}
	for _, kv := range unknown.Attributes() {
		if strings.Contains(kv.Value.Emit(), "made_up") {
			t.Errorf("the unknown tool's span carries the made-up name: %s=%s", kv.Key, kv.Value.Emit())
		}
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var first, second map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &first)
	_ = json.Unmarshal([]byte(lines[1]), &second)
	if first["trace_id"] != root.SpanContext().TraceID().String() || first["span_id"] != chat.SpanContext().SpanID().String() ||
		first["session"] != "s" {
		t.Errorf("line with a span: %v", first)
	}
	if _, ok := second["trace_id"]; ok {
		t.Errorf("line without a span: %v", second)
	}
}

// TestTracesURL: the DSHD setting wins, then the OTLP traces endpoint as is, then the base one.
func TestTracesURL(t *testing.T) {
	for _, c := range []struct{ d, tr, base, want string }{
		{"", "", "", ""},
		{"http://c:4318/", "http://x/v1/traces", "http://y", "http://c:4318/v1/traces"},
		{"", "http://x/custom", "http://y", "http://x/custom"},
		{"", "", "http://y:4318", "http://y:4318/v1/traces"},
	} {
		if got := TracesURL(c.d, c.tr, c.base); got != c.want {
			t.Errorf("TracesURL(%q, %q, %q) = %q, want %q", c.d, c.tr, c.base, got, c.want)
		}
	}
	tp, shutdown, err := NewTracerProvider(context.Background(), TraceConfig{})
	if tp != nil || err != nil || shutdown(context.Background()) != nil {
		t.Error("no URL made a tracer provider")
	}
}

// TestNoTracingAllocatesNothing: with tracing off (no recording span in the context) the span
// helpers of the hot path allocate nothing.
func TestNoTracingAllocatesNothing(t *testing.T) {
	ctx := context.WithValue(context.Background(), struct{}{}, 1)
	n := testing.AllocsPerRun(100, func() {
		c, s := StartChat(ctx, "p", "m")
		EndChat(s, 1, 2, "stop", "")
		c, s = StartTool(c, "id")
		EndTool(s, "echo", true, "X")
		_, s = StartChild(c, "dshd.step", trace.SpanKindInternal)
		s.End()
	})
	if n != 0 {
		t.Errorf("%v allocations per run with tracing off", n)
	}
}
