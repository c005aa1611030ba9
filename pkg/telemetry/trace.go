package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of dshd's spans.
const ScopeName = "github.com/dshd/dshd"

// Span attribute keys: dshd's own and the GenAI conventions' (docs/observability.md).
const (
	AttrSession   = attribute.Key("dshd.session.id")
	AttrTenant    = attribute.Key("dshd.tenant.id")
	AttrTurn      = attribute.Key("dshd.turn")
	AttrStep      = attribute.Key("dshd.step")
	AttrSeqFirst  = attribute.Key("dshd.seq.first")
	AttrSeqLast   = attribute.Key("dshd.seq.last")
	AttrEndReason = attribute.Key("dshd.turn.end_reason")
	AttrRepair    = attribute.Key("dshd.turn.repair")

	AttrOperation     = attribute.Key("gen_ai.operation.name")
	AttrProvider      = attribute.Key("gen_ai.provider.name")
	AttrRequestModel  = attribute.Key("gen_ai.request.model")
	AttrInputTokens   = attribute.Key("gen_ai.usage.input_tokens")
	AttrOutputTokens  = attribute.Key("gen_ai.usage.output_tokens")
	AttrFinishReasons = attribute.Key("gen_ai.response.finish_reasons")
	AttrToolName      = attribute.Key("gen_ai.tool.name")
	AttrToolCallID    = attribute.Key("gen_ai.tool.call.id")
	AttrErrorType     = attribute.Key("error.type")
)

// Tracer returns tp's tracer of dshd's scope, or nil when tp is nil (tracing off).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(ScopeName)
}

// StartChild starts a span named name under the span of ctx, with the tracer that span came
// from. When ctx has no recording span (tracing off, or outside a turn) it returns ctx and that
// non-recording span unchanged, allocating nothing: callers set attributes only when
// span.IsRecording().
func StartChild(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	return parent.TracerProvider().Tracer(ScopeName).Start(ctx, name, trace.WithSpanKind(kind))
}

// StartTool starts the execute_tool span of a tool call under the span of ctx (a step, or the
// run_code call of a code-mode sub-call). The span is named, and gets its gen_ai.tool.name, when
// it ends (EndTool): a name the registry does not know is the model's invention, and becomes
// UnknownTool there as in the metrics, never a span name.
func StartTool(ctx context.Context, callID string) (context.Context, trace.Span) {
	if parent := trace.SpanFromContext(ctx); !parent.IsRecording() {
		return ctx, parent
	}
	ctx, span := StartChild(ctx, "execute_tool", trace.SpanKindInternal)
	span.SetAttributes(AttrOperation.String("execute_tool"), AttrToolCallID.String(callID))
	return ctx, span
}

// StartChat starts the span of a model call ("chat <model>", kind client) under the span of ctx.
func StartChat(ctx context.Context, provider, model string) (context.Context, trace.Span) {
	if parent := trace.SpanFromContext(ctx); !parent.IsRecording() {
		return ctx, parent
	}
	ctx, span := StartChild(ctx, OperationChat+" "+model, trace.SpanKindClient)
	span.SetAttributes(AttrOperation.String(OperationChat), AttrProvider.String(provider), AttrRequestModel.String(model))
	return ctx, span
}

// EndChat ends a model call span with the call's usage and finish reason, or its failure code.
func EndChat(span trace.Span, input, output int, finish, errCode string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(AttrInputTokens.Int(input), AttrOutputTokens.Int(output))
	if finish != "" {
		span.SetAttributes(AttrFinishReasons.StringSlice([]string{finish}))
	}
	if errCode != "" {
		span.SetAttributes(AttrErrorType.String(errCode))
		span.SetStatus(codesError, errCode)
	}
	span.End()
}

// EndTool ends the span of a call of the tool name; errCode is the failure's code, empty when
// the call succeeded. The span is named "execute_tool <ToolName(name, errCode)>".
func EndTool(span trace.Span, name string, failed bool, errCode string) {
	if !span.IsRecording() {
		return
	}
	tool := ToolName(name, errCode)
	span.SetName("execute_tool " + tool)
	span.SetAttributes(AttrToolName.String(tool))
	if failed {
		if errCode == "" {
			errCode = "TOOL_ERROR"
		}
		span.SetAttributes(AttrErrorType.String(errCode))
		span.SetStatus(codesError, errCode)
	}
	span.End()
}

// Sampled reports whether span is a sampled span: one that is exported, so that its trace id
// leads somewhere. Only a sampled span's trace id goes on events and log lines.
func Sampled(span trace.Span) bool {
	return span.SpanContext().IsSampled()
}

// TraceConfig configures the OTLP/HTTP trace exporter.
type TraceConfig struct {
	// URL is where spans are posted (the full traces URL, ending in /v1/traces). Empty: no
	// tracing.
	URL string
	// BatchTimeout bounds how long a finished span waits before it is exported. Default 5 s.
	BatchTimeout time.Duration
	// ServiceName is the resource's service.name unless OTEL_SERVICE_NAME sets one. Default "dshd".
	ServiceName string
}

// NewTracerProvider returns the tracer provider exporting to cfg.URL over OTLP/HTTP (protobuf)
// through a batch span processor, and its shutdown, which flushes what is buffered. With no URL
// it returns nil and a no-op shutdown: nothing is traced. The exporter also reads the standard
// OTEL_EXPORTER_OTLP_* settings that cfg does not give (headers, timeout, compression).
func NewTracerProvider(ctx context.Context, cfg TraceConfig) (*sdktrace.TracerProvider, func(context.Context) error, error) {
	if cfg.URL == "" {
		return nil, func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(cfg.URL))
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: OTLP exporter: %w", err)
	}
	if cfg.ServiceName == "" {
		cfg.ServiceName = "dshd"
	}
	res := resource.Default()
	if os.Getenv("OTEL_SERVICE_NAME") == "" {
		if r, err := resource.Merge(res, resource.NewSchemaless(attribute.String("service.name", cfg.ServiceName))); err == nil {
			res = r
		} else if !errors.Is(err, resource.ErrSchemaURLConflict) {
			return nil, nil, err
		}
	}
	var opts []sdktrace.BatchSpanProcessorOption
	if cfg.BatchTimeout > 0 {
		opts = append(opts, sdktrace.WithBatchTimeout(cfg.BatchTimeout))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, opts...), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}

// TracesURL is the OTLP/HTTP traces URL of the settings: dshdEndpoint (DSHD_OTLP_ENDPOINT, a
// base URL), else tracesEndpoint (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, used as is), else endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT, a base URL). A base URL gets /v1/traces appended. Empty when
// none is set: tracing is off.
func TracesURL(dshdEndpoint, tracesEndpoint, endpoint string) string {
	switch {
	case dshdEndpoint != "":
		return trimSlash(dshdEndpoint) + "/v1/traces"
	case tracesEndpoint != "":
		return tracesEndpoint
	case endpoint != "":
		return trimSlash(endpoint) + "/v1/traces"
	}
	return ""
}

func trimSlash(s string) string {
	for len(s) > 0 && s[len(s)-1] == '/' {
		s = s[:len(s)-1]
	}
	return s
}
