package api

import (
	"crypto/subtle"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dshd/dshd/pkg/telemetry"
)

// metrics are the HTTP metrics of one Server, in a registry of the server's (Config.Registry, or
// one of its own) so that several servers can live in one process (tests run two).
type metrics struct {
	registry *prometheus.Registry
	// ops are the operational series (telemetry.Metrics) the server records (SSE bytes, the
	// streaming POST's first event); Config.Metrics, or its own when it has its own registry.
	ops      *telemetry.Metrics
	requests *prometheus.CounterVec   // every request, streams included
	latency  *prometheus.HistogramVec // every request except SSE streams
	streams  prometheus.Gauge         // SSE streams open now
}

// newMetrics defines the HTTP series on reg (a new registry when nil) with the Go and process
// collectors; ops are the operational series, made on a new registry when nil.
func newMetrics(reg *prometheus.Registry, ops *telemetry.Metrics) *metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
		if ops == nil {
			ops = telemetry.NewMetrics(reg, telemetry.Options{})
		}
	}
	m := &metrics{
		registry: reg,
		ops:      ops,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dshd_http_requests_total",
			Help: "HTTP requests served, by chi route pattern, method and status.",
		}, []string{"route", "method", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dshd_http_request_duration_seconds",
			Help:    "HTTP request latency by chi route pattern, method and status; SSE streams are not included.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "method", "status"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dshd_sse_streams_open",
			Help: "Server-sent event streams open now.",
		}),
	}
	m.registry.MustRegister(m.requests, m.latency, m.streams,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observe records one finished request. route is the chi route pattern ("" when none matched).
func (m *metrics) observe(route, method string, status int, seconds float64, stream bool) {
	if route == "" {
		route = "unmatched"
	}
	route = metricsRoute(route)
	method = metricsMethod(method)
	s := strconv.Itoa(status)
	m.requests.WithLabelValues(route, method, s).Inc()
	if !stream {
		m.latency.WithLabelValues(route, method, s).Observe(seconds)
	}
}

// metricsMethod is the method label: the standard methods as they are, anything else "other", so
// that unauthenticated requests cannot grow the label set without bound.
func metricsMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return m
	}
	return "other"
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry})
}

// metricsGuard requires Config.MetricsToken as a bearer token on h (GET /metrics) when one is
// set; without one, h answers anyone.
func (s *Server) metricsGuard(h http.Handler) http.Handler {
	if s.cfg.MetricsToken == "" {
		return h
	}
	want := []byte(s.cfg.MetricsToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearer(r)
		if !ok || subtle.ConstantTimeCompare([]byte(token), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dshd-metrics"`)
			writeProblem(w, CodeUnauthorized, "send the metrics token as Authorization: Bearer <token>")
			return
		}
		info(r).authenticated()
		h.ServeHTTP(w, r)
	})
}
