package telemetry

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Request spans: every HTTP request the API serves gets a span of kind server (api's observe
// middleware), named "<method> <route>" once the route is known. An incoming W3C traceparent
// becomes the span's parent when the operator trusts the ingress (DSHD_TRACE_TRUST_INGRESS);
// otherwise the request starts a trace of its own, linked to the caller's span, so that an
// untrusted client can neither join dshd's spans to its trace nor choose their sampling.
//
// A turn outlives the request that posted its message: its span is the root of a trace of its
// own, linked to the posting request's span (WithTurnLink, TakeTurnLink).

// HTTP span attribute keys (OpenTelemetry's HTTP server conventions).
const (
	AttrHTTPMethod = attribute.Key("http.request.method")
	AttrHTTPRoute  = attribute.Key("http.route")
	AttrHTTPStatus = attribute.Key("http.response.status_code")
)

// The GenAI agent conventions of a turn's span.
const (
	OperationInvokeAgent = "invoke_agent"
	AttrConversationID   = attribute.Key("gen_ai.conversation.id")
)

var traceContext = propagation.TraceContext{}

// StartRequest starts the server span of a request with header h under ctx. With trustParent an
// incoming traceparent is the span's parent; without, it is only a link. A nil tracer starts
// nothing and returns ctx's span (non-recording).
func StartRequest(ctx context.Context, tracer trace.Tracer, h http.Header, trustParent bool, method string) (context.Context, trace.Span) {
	if tracer == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(AttrHTTPMethod.String(method))}
	remote := trace.SpanContextFromContext(traceContext.Extract(context.Background(), propagation.HeaderCarrier(h)))
	switch {
	case remote.IsValid() && trustParent:
		ctx = trace.ContextWithRemoteSpanContext(ctx, remote)
	case remote.IsValid():
		opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: remote}))
	default:
		opts = append(opts, trace.WithNewRoot())
	}
	return tracer.Start(ctx, method, opts...)
}

// EndRequest names the request's span by its route (the path when no route matched: "<method>"
// alone, as the conventions ask, so that unknown paths do not become span names), records the
// status (an error from 500 on) and the tenant and session when known, and ends it.
func EndRequest(span trace.Span, method, route string, status int, tenant, session string) {
	if !span.IsRecording() {
		return
	}
	if route != "" {
		span.SetName(method + " " + route)
		span.SetAttributes(AttrHTTPRoute.String(route))
	}
	span.SetAttributes(AttrHTTPStatus.Int(status))
	if tenant != "" {
		span.SetAttributes(AttrTenant.String(tenant))
	}
	if session != "" {
		span.SetAttributes(AttrSession.String(session))
	}
	if status >= 500 {
		span.SetAttributes(AttrErrorType.String(strconv.Itoa(status)))
		span.SetStatus(codesError, strconv.Itoa(status))
	}
	span.End()
}

// Traceparent is the W3C traceparent of ctx's span when it is sampled, else "": what a turn
// started by this request links to.
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsSampled() {
		return ""
	}
	c := propagation.MapCarrier{}
	traceContext.Inject(ctx, c)
	return c["traceparent"]
}

// turnLink is a link waiting for the next turn span started under a context: the first turn a
// serve runs is the one its wake (a post) asked for.
type turnLink struct {
	link  trace.Link
	taken atomic.Bool
}

type turnLinkKey struct{}

// WithTurnLink returns ctx carrying traceparent (Traceparent of the request that woke the serve)
// as the link of the next turn span started under it. An empty or malformed traceparent leaves
// ctx as it is.
func WithTurnLink(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	sc := trace.SpanContextFromContext(traceContext.Extract(context.Background(),
		propagation.MapCarrier{"traceparent": traceparent}))
	if !sc.IsValid() {
		return ctx
	}
	return context.WithValue(ctx, turnLinkKey{}, &turnLink{link: trace.Link{SpanContext: sc}})
}

// TakeTurnLink returns the link WithTurnLink put in ctx, once: later turns of the same serve
// were asked for by other posts.
func TakeTurnLink(ctx context.Context) (trace.Link, bool) {
	l, ok := ctx.Value(turnLinkKey{}).(*turnLink)
	if !ok || l.taken.Swap(true) {
		return trace.Link{}, false
	}
	return l.link, true
}
