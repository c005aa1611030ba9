// Package telemetry holds dshd's operational metrics (Prometheus) and its trace helpers
// (OpenTelemetry), so that the packages that do the work (pkg/agentloop, pkg/worker,
// pkg/pgstore, pkg/approval, pkg/codemode, api) record them without knowing each other or the
// program that exposes them. Names follow the OpenTelemetry GenAI semantic conventions where one
// exists (gen_ai.client.operation.duration becomes gen_ai_client_operation_duration_seconds) and
// are dshd_* otherwise; docs/observability.md lists every series.
//
// Every label set is bounded: no session or tenant ids, and the values that come from tenants'
// configuration or a model (model names, tool names, error codes) go through a Bound, which
// keeps at most a fixed number of distinct values and reports the rest as "other".
//
// A nil *Metrics records nothing, so a component built without one (most tests) needs no change.
package telemetry

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dshd/dshd/pkg/fault"
)

// DefaultModels are the model names that always get their own gen_ai_request_model label
// value: DeepSeek's models (the default provider's).
var DefaultModels = []string{"deepseek-chat", "deepseek-reasoner"}

// Options configure NewMetrics. The zero value is valid.
type Options struct {
	// Models are model names that get their own gen_ai_request_model label value besides
	// DefaultModels; any other name is "other". The list is the operator's (DSHD_METRICS_MODELS),
	// never learned from traffic: tenants choose their presets' model names, and a tenant must
	// not be able to fill the label set with made-up names and push the others' into "other".
	Models []string
	// MaxTools bounds the tool-name label values. Default 256.
	MaxTools int
}

// Metrics are the operational series of one replica. Its methods are safe for concurrent use
// and do nothing on a nil receiver.
type Metrics struct {
	models, providers, tools, codes *Bound

	opDuration *prometheus.HistogramVec // gen_ai_client_operation_duration_seconds
	tokenUsage *prometheus.HistogramVec // gen_ai_client_token_usage
	firstChunk *prometheus.HistogramVec // gen_ai_client_operation_time_to_first_chunk_seconds
	modelErrs  *prometheus.CounterVec   // dshd_model_errors_total
	toolDur    *prometheus.HistogramVec // gen_ai_execute_tool_duration_seconds
	toolErrs   *prometheus.CounterVec   // dshd_tool_errors_total

	turnDur   *prometheus.HistogramVec // dshd_turn_duration_seconds
	turnErrs  *prometheus.CounterVec   // dshd_turn_errors_total
	turnSteps prometheus.Histogram     // dshd_turn_steps

	jobWait   prometheus.Histogram   // dshd_queue_job_wait_seconds
	takeovers prometheus.Counter     // dshd_lease_takeovers_total
	repairs   prometheus.Counter     // dshd_crash_repairs_total
	approvals prometheus.Gauge       // dshd_approvals_pending
	parked    *prometheus.CounterVec // dshd_turns_parked_total{reason}
	resumed   prometheus.Counter     // dshd_turns_resumed_total

	sseBytes   prometheus.Counter   // dshd_sse_bytes_total
	sseEvents  prometheus.Counter   // dshd_sse_events_total
	firstEvent prometheus.Histogram // dshd_stream_first_event_seconds
}

// Buckets of the latency histograms: from a millisecond to ten minutes (a turn may run long).
var (
	latencyBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	// tokenBuckets are the GenAI conventions' recommended boundaries for token counts.
	tokenBuckets = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304}
	stepBuckets  = []float64{1, 2, 3, 5, 8, 13, 21, 34, 55, 89}
)

// Label names (the GenAI attribute names with dots made underscores, as OpenTelemetry's
// Prometheus exporter writes them).
const (
	labelOperation = "gen_ai_operation_name"
	labelProvider  = "gen_ai_provider_name"
	labelModel     = "gen_ai_request_model"
	labelTokenType = "gen_ai_token_type"
	labelTool      = "gen_ai_tool_name"
	labelErrorType = "error_type"
)

// OperationChat is the gen_ai.operation.name of a model call.
const OperationChat = "chat"

// NewMetrics defines every series and registers it on reg.
func NewMetrics(reg prometheus.Registerer, o Options) *Metrics {
	if o.MaxTools <= 0 {
		o.MaxTools = 256
	}
	m := &Metrics{
		models:    NewBound(0, append(slices.Clone(DefaultModels), o.Models...)...),
		providers: NewBound(16),
		tools:     NewBound(o.MaxTools),
		codes:     NewBound(64),
		opDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_client_operation_duration_seconds",
			Help:    "Duration of model calls (one attempt: a retried call counts each attempt), by operation, provider, requested model and error type (empty when it succeeded).",
			Buckets: latencyBuckets,
		}, []string{labelOperation, labelProvider, labelModel, labelErrorType}),
		tokenUsage: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_client_token_usage",
			Help:    "Tokens of model calls as the provider reported them, by operation, provider, requested model and token type (input, output).",
			Buckets: tokenBuckets,
		}, []string{labelOperation, labelProvider, labelModel, labelTokenType}),
		firstChunk: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_client_operation_time_to_first_chunk_seconds",
			Help:    "Time from sending a model request to receiving the first chunk of its stream (time to first token), by operation, provider and requested model.",
			Buckets: latencyBuckets,
		}, []string{labelOperation, labelProvider, labelModel}),
		modelErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dshd_model_errors_total",
			Help: "Failed model call attempts, retried or not, by provider and error code (RATE_LIMIT, SERVER, TRANSPORT, TIMEOUT, ...).",
		}, []string{labelProvider, labelErrorType}),
		toolDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_execute_tool_duration_seconds",
			Help:    "Duration of tool calls of the agent loop, from tool/call to tool/result (approval waits included), by tool and error type (empty when it succeeded).",
			Buckets: latencyBuckets,
		}, []string{labelTool, labelErrorType}),
		toolErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dshd_tool_errors_total",
			Help: "Tool calls that ended with a failure result, by tool and error code (TOOL_ERROR when the tool gave none).",
		}, []string{labelTool, labelErrorType}),
		turnDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dshd_turn_duration_seconds",
			Help:    "Duration of turns run on this replica, by end reason (the turn/end reason kind: completed, error, aborted, max-tokens).",
			Buckets: latencyBuckets,
		}, []string{"reason"}),
		turnErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dshd_turn_errors_total",
			Help: "Turns that ended with reason error, by the error's code.",
		}, []string{labelErrorType}),
		turnSteps: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dshd_turn_steps",
			Help:    "Steps (model calls with their tools) per turn.",
			Buckets: stepBuckets,
		}),
		jobWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dshd_queue_job_wait_seconds",
			Help:    "Time from a wake job's scheduled time to the start of its work on this replica.",
			Buckets: latencyBuckets,
		}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dshd_lease_takeovers_total",
			Help: "Run leases this replica took over from a holder whose lease had expired (a crashed or stalled replica).",
		}),
		repairs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dshd_crash_repairs_total",
			Help: "Open turns this replica closed by crash repair (SES-14).",
		}),
		approvals: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dshd_approvals_pending",
			Help: "Tool calls on this replica waiting for an approval decision now (a parked turn's ask waits on no replica).",
		}),
		parked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dshd_turns_parked_total",
			Help: "Turns this replica parked (E6), by reason: approval, client or handover.",
		}, []string{"reason"}),
		resumed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dshd_turns_resumed_total",
			Help: "Parked turns this replica resumed (E6).",
		}),
		sseBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dshd_sse_bytes_total",
			Help: "Bytes of server-sent event frames (and heartbeats) written to clients.",
		}),
		sseEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dshd_sse_events_total",
			Help: "Event frames written to server-sent event streams.",
		}),
		firstEvent: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dshd_stream_first_event_seconds",
			Help:    "Streaming POST /v1/sessions/{id}/messages: time from the start of the request to the first event frame written.",
			Buckets: latencyBuckets,
		}),
	}
	reg.MustRegister(m.opDuration, m.tokenUsage, m.firstChunk, m.modelErrs, m.toolDur, m.toolErrs,
		m.turnDur, m.turnErrs, m.turnSteps, m.jobWait, m.takeovers, m.repairs, m.approvals, m.parked, m.resumed,
		m.sseBytes, m.sseEvents, m.firstEvent)
	return m
}

// ModelCall records one model call attempt: its duration and, when errCode is not empty, its
// failure.
func (m *Metrics) ModelCall(provider, model, errCode string, d time.Duration) {
	if m == nil {
		return
	}
	p, mo, code := m.providers.Of(provider), m.models.Of(model), m.codes.Of(errCode)
	if errCode == "" {
		code = ""
	}
	m.opDuration.WithLabelValues(OperationChat, p, mo, code).Observe(d.Seconds())
	if errCode != "" {
		m.modelErrs.WithLabelValues(p, code).Inc()
	}
}

// ModelFirstChunk records a model call's time to its first chunk.
func (m *Metrics) ModelFirstChunk(provider, model string, d time.Duration) {
	if m == nil {
		return
	}
	m.firstChunk.WithLabelValues(OperationChat, m.providers.Of(provider), m.models.Of(model)).Observe(d.Seconds())
}

// ModelTokens records the input and output tokens a model call reported.
func (m *Metrics) ModelTokens(provider, model string, input, output int) {
	if m == nil {
		return
	}
	p, mo := m.providers.Of(provider), m.models.Of(model)
	m.tokenUsage.WithLabelValues(OperationChat, p, mo, "input").Observe(float64(input))
	m.tokenUsage.WithLabelValues(OperationChat, p, mo, "output").Observe(float64(output))
}

// ToolCall records one tool call of the agent loop; errCode is empty when it succeeded. A call of
// a name the registry does not know (UNKNOWN_TOOL) is recorded as "unknown" (ToolName).
func (m *Metrics) ToolCall(tool, errCode string, d time.Duration) {
	if m == nil {
		return
	}
	t := m.tools.Of(ToolName(tool, errCode))
	code := ""
	if errCode != "" {
		code = m.codes.Of(errCode)
		m.toolErrs.WithLabelValues(t, code).Inc()
	}
	m.toolDur.WithLabelValues(t, code).Observe(d.Seconds())
}

// UnknownTool is the tool name of metrics and spans for a call of a name the registry does not
// know: the model made it up, so it is no label value and no span name.
const UnknownTool = "unknown"

// ToolName is the name metrics and spans give a tool call of name whose result has errCode
// (empty on success): UnknownTool for a name the registry does not know, name otherwise.
func ToolName(name, errCode string) string {
	if errCode == fault.CodeUnknownTool {
		return UnknownTool
	}
	return name
}

// TurnEnded records a finished turn: its end reason, the error code of an error ending, its
// duration and its steps.
func (m *Metrics) TurnEnded(reason, errCode string, d time.Duration, steps int) {
	if m == nil {
		return
	}
	m.turnDur.WithLabelValues(reason).Observe(d.Seconds())
	if errCode != "" {
		m.turnErrs.WithLabelValues(m.codes.Of(errCode)).Inc()
	}
	m.turnSteps.Observe(float64(steps))
}

// JobWait records how long a wake job waited from its scheduled time to its start.
func (m *Metrics) JobWait(d time.Duration) {
	if m == nil {
		return
	}
	m.jobWait.Observe(max(d, 0).Seconds())
}

// LeaseTakeover counts a run lease taken over from an expired holder.
func (m *Metrics) LeaseTakeover() {
	if m != nil {
		m.takeovers.Inc()
	}
}

// CrashRepair counts an open turn closed by crash repair.
func (m *Metrics) CrashRepair() {
	if m != nil {
		m.repairs.Inc()
	}
}

// TurnParked counts a turn parked with reason (eventlog.ParkApproval, ParkClient, ParkHandover).
func (m *Metrics) TurnParked(reason string) {
	if m != nil {
		m.parked.WithLabelValues(reason).Inc()
	}
}

// TurnResumed counts a parked turn resumed.
func (m *Metrics) TurnResumed() {
	if m != nil {
		m.resumed.Inc()
	}
}

// ApprovalWaiting adds delta (1 when an ask starts waiting, -1 when it is decided) to the
// pending approvals.
func (m *Metrics) ApprovalWaiting(delta int) {
	if m != nil {
		m.approvals.Add(float64(delta))
	}
}

// SSEWritten records frames written to a server-sent event stream: bytes, and how many of them
// were event frames.
func (m *Metrics) SSEWritten(bytes, events int) {
	if m == nil {
		return
	}
	m.sseBytes.Add(float64(bytes))
	if events > 0 {
		m.sseEvents.Add(float64(events))
	}
}

// StreamFirstEvent records a streaming POST's time from request start to its first event frame.
func (m *Metrics) StreamFirstEvent(d time.Duration) {
	if m != nil {
		m.firstEvent.Observe(d.Seconds())
	}
}
