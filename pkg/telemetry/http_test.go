package telemetry

import (
	"context"
	"net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestRequestSpanParentAndLink: a traceparent is the request span's parent only when trusted, a
// link otherwise; a malformed one is ignored; the turn link a post hands on is taken once.
func TestRequestSpanParentAndLink(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tracer := Tracer(tp)
	const caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	h := http.Header{"Traceparent": {caller}}

	ctx, span := StartRequest(context.Background(), tracer, h, true, "POST")
	EndRequest(span, "POST", "/v1/x", 202, "", "")
	if got := span.SpanContext().TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trusted: trace %s, want the caller's", got)
	}
	tp1 := Traceparent(ctx)
	if tp1 == "" || tp1 == caller {
		t.Errorf("Traceparent of the request span = %q", tp1)
	}

	_, span = StartRequest(context.Background(), tracer, h, false, "GET")
	EndRequest(span, "GET", "", 500, "t", "s")
	if span.SpanContext().TraceID().String() == "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Error("untrusted: the request span joined the caller's trace")
	}
	_, span = StartRequest(context.Background(), tracer, http.Header{"Traceparent": {"00-zz-yy-01"}}, true, "GET")
	EndRequest(span, "GET", "", 200, "", "")

	ended := rec.Ended()
	if len(ended) != 3 {
		t.Fatalf("%d spans ended", len(ended))
	}
	if ended[0].Name() != "POST /v1/x" || ended[0].Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("trusted span %q under %s", ended[0].Name(), ended[0].Parent().SpanID())
	}
	if ended[1].Name() != "GET" || ended[1].Parent().IsValid() || len(ended[1].Links()) != 1 ||
		ended[1].Links()[0].SpanContext.SpanID().String() != "00f067aa0ba902b7" || ended[1].Status().Code != codesError {
		t.Errorf("untrusted span %q parent %v links %v status %v", ended[1].Name(), ended[1].Parent(), ended[1].Links(), ended[1].Status())
	}
	if ended[2].Parent().IsValid() || len(ended[2].Links()) != 0 {
		t.Errorf("a malformed traceparent became parent %v or links %v", ended[2].Parent(), ended[2].Links())
	}

	lctx := WithTurnLink(context.Background(), tp1)
	if l, ok := TakeTurnLink(lctx); !ok || l.SpanContext.SpanID() != ended[0].SpanContext().SpanID() {
		t.Errorf("TakeTurnLink = %v, %v", l, ok)
	}
	if _, ok := TakeTurnLink(lctx); ok {
		t.Error("the turn link was taken twice")
	}
	for _, bad := range []string{"", "garbage"} {
		if _, ok := TakeTurnLink(WithTurnLink(context.Background(), bad)); ok {
			t.Errorf("WithTurnLink(%q) made a link", bad)
		}
	}
	if Traceparent(context.Background()) != "" {
		t.Error("Traceparent of a context without a span is not empty")
	}
}
