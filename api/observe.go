package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/dshd/dshd/pkg/telemetry"
)

// reqInfo is what the observe middleware knows about a request; handlers and the auth middleware
// fill in the tenant, the session and whether the response is a stream. It belongs to the
// request's goroutine.
type reqInfo struct {
	id      string
	tenant  uuid.UUID
	session string
	stream  bool
	base    *slog.Logger
	// release gives back the request's slot among the unauthenticated ones (admit); nil when it
	// holds none.
	release func()
	start   time.Time
	// detached is set by a stream that took its connection over and outlives its handler: the
	// stream records the request when it ends (stream.go).
	detached bool
}

// authenticated records that the request proved an API key or the admin token: it no longer
// counts among the unauthenticated requests.
func (i *reqInfo) authenticated() {
	if i.release != nil {
		i.release()
		i.release = nil
	}
}

type infoKey struct{}

func info(r *http.Request) *reqInfo {
	if i, ok := r.Context().Value(infoKey{}).(*reqInfo); ok {
		return i
	}
	return &reqInfo{base: slog.Default()}
}

// logger returns the server's logger with the request id, tenant and session of r.
func logger(r *http.Request) *slog.Logger { return info(r).logger() }

// logger returns the server's logger with the request id, tenant and session of the request.
func (i *reqInfo) logger() *slog.Logger {
	l := i.base.With(slog.String("request_id", i.id))
	if i.tenant != uuid.Nil {
		l = l.With(slog.String("tenant", i.tenant.String()))
	}
	if i.session != "" {
		l = l.With(slog.String("session", i.session))
	}
	return l
}

func setSession(r *http.Request, id uuid.UUID) { info(r).session = id.String() }

// observe gives each request an id (a sane incoming X-Request-Id, else a new one), recovers
// panics as 500 problems, and records one log line and the HTTP metrics when the request ends.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get("X-Request-Id")
		if !validRequestID(id) {
			id = uuid.NewString()
		}
		w.Header().Set("X-Request-Id", id)
		ri := &reqInfo{id: id, base: s.logger, start: start}
		ctx, span := telemetry.StartRequest(r.Context(), s.cfg.Tracer, r.Header, s.cfg.TraceTrustIngress, r.Method)
		r = r.WithContext(context.WithValue(ctx, infoKey{}, ri))
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		defer func() {
			if span.IsRecording() {
				defer s.endSpan(span, r, ww, ri)
			}
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				logger(r).Error("panic", slog.String("error", fmt.Sprint(p)), slog.String("stack", string(debug.Stack())))
				if ww.Status() == 0 {
					writeProblem(ww, CodeInternal, "internal error")
				}
			}
			if !ri.detached {
				s.finish(r, ww, time.Since(start))
			}
		}()
		next.ServeHTTP(ww, r)
	})
}

// endSpan ends the request's span (a stream's covers its handler, not what a detached stream
// writes later). Only the route goes on it, never the path or its query, which can hold a token.
func (s *Server) endSpan(span trace.Span, r *http.Request, ww middleware.WrapResponseWriter, ri *reqInfo) {
	status := ww.Status()
	if status == 0 {
		status = http.StatusOK
	}
	route := ""
	if rc := chi.RouteContext(r.Context()); rc != nil {
		route = metricsRoute(rc.RoutePattern())
	}
	tenant := ""
	if ri.tenant != uuid.Nil {
		tenant = ri.tenant.String()
	}
	telemetry.EndRequest(span, r.Method, route, status, tenant, ri.session)
}

func (s *Server) finish(r *http.Request, ww middleware.WrapResponseWriter, d time.Duration) {
	status := ww.Status()
	if status == 0 {
		status = http.StatusOK
	}
	s.record(s.recordOf(ww, r), status, ww.BytesWritten(), d)
}

// reqRecord is what the request log line and the metrics need of a request: a stream that
// outlives its handler keeps this, not the request.
type reqRecord struct {
	ri                  *reqInfo
	method, path, route string
	bytes               int // written through the handler's ResponseWriter
}

func (s *Server) recordOf(w http.ResponseWriter, r *http.Request) reqRecord {
	rec := reqRecord{ri: info(r), method: r.Method, path: r.URL.Path}
	if rc := chi.RouteContext(r.Context()); rc != nil {
		rec.route = rc.RoutePattern()
	}
	if ww, ok := w.(interface{ BytesWritten() int }); ok {
		rec.bytes = ww.BytesWritten()
	}
	return rec
}

// record writes the request's log line and metrics.
func (s *Server) record(rec reqRecord, status, bytes int, d time.Duration) {
	s.metrics.observe(rec.route, rec.method, status, d.Seconds(), rec.ri.stream)
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelError
	}
	rec.ri.logger().LogAttrs(context.Background(), level, "request",
		slog.String("method", rec.method), slog.String("path", rec.path), slog.String("route", rec.route),
		slog.Int("status", status), slog.Float64("duration_ms", float64(d.Microseconds())/1000),
		slog.Int("bytes", bytes), slog.Bool("stream", rec.ri.stream))
}

// validRequestID accepts ids of 1 to 64 printable ASCII characters without spaces.
func validRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// limitBody caps every request body; reading past the cap fails with *http.MaxBytesError (413).
func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := s.cfg.MaxBodyBytes
		if r.Method == http.MethodPost && r.URL.Path == importPath {
			limit = max(limit, s.cfg.ImportMaxBytes) // a session log; the handler holds it to ImportMaxBytes
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		next.ServeHTTP(w, r)
	})
}

// writeDeadline bounds the writing of every response by Config.WriteTimeout from the start of the
// request: a client that stops reading gets its connection closed instead of holding the handler
// (and its response) forever. SSE streams replace the deadline with one per write (stream.go). The
// deadline stays set after the handler, so the end of the response is bounded too; the next
// request on the connection sets its own.
func (s *Server) writeDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
		next.ServeHTTP(w, r)
	})
}
