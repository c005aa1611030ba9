// Package api is the HTTP surface of dshd (docs/architecture.md section 2): a chi router with API-key
// authentication, problem+json errors mapped in one table (errors.go), request logs and
// Prometheus metrics, presets, sessions, event pages and live SSE streams of the session log.
//
// Only this package imports chi.
package api

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/dshd/dshd"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/telemetry"
	"github.com/dshd/dshd/web"
)

// Subscriber wakes the streams of a session when events are appended to it (pgstore.Hub).
// Subscribe returns a channel that receives a value after new appends (wake-ups coalesce; the
// subscriber re-reads the log after its cursor) and a cancel func the caller must call; Latest is
// the highest seq the notifications vouch for.
type Subscriber = pgstore.Notifier

// Workspaces are the sessions' tool workspaces, by session id.
type Workspaces interface {
	// AdmitCopy admits a copy of the workspace of src against its tenant's disk bound before
	// anything is written (sandbox.ErrTenantQuota when it would go over); call done once after
	// Copy.
	AdmitCopy(src string) (done func(), err error)
	// Copy copies the workspace of src to a new workspace dst (nothing when src has none).
	Copy(src, dst string) error
	// Delete removes the workspace of id (nothing when it has none).
	Delete(id string) error
}

// Config holds the dependencies and settings of a Server.
type Config struct {
	Tenants *pgstore.Tenants // required
	Presets *pgstore.Presets // required
	Log     *pgstore.Store   // required: sessions and their events
	Hub     Subscriber       // required: live wake-ups for SSE streams
	Turns   Turns            // required: posting messages and cancelling turns
	Prompts Prompts          // required: prompts of sessions and the tool catalogue

	// Workspaces, when set, are the sessions' tool workspaces (sandbox.Workspaces): a fork copies
	// its source's workspace to the child, a delete removes the session's. Nil: no workspaces.
	Workspaces Workspaces

	// Ready reports whether the service can take traffic (database reachable, migrations
	// applied); /readyz answers 503 with its error. Nil means always ready.
	Ready func(context.Context) error
	// Logger receives request logs and internal errors. Default slog.Default().
	Logger *slog.Logger
	// AdminToken authorizes POST /v1/tenants. Empty disables tenant administration.
	AdminToken string
	// AdminTokenPrevious are former admin tokens still accepted beside AdminToken while a
	// rotation is under way (auth.go); ignored without an AdminToken. Default none.
	AdminTokenPrevious []string
	// MaxBodyBytes caps request bodies; a larger body answers 413. Default 1 MiB.
	MaxBodyBytes int64
	// ImportMaxBytes caps the body of POST /v1/sessions/import (a session log); a larger body
	// answers 413. Default DefaultImportMaxBytes (32 MiB); it replaces MaxBodyBytes for that route
	// only when it is the larger.
	ImportMaxBytes int64
	// Heartbeat is the interval of the SSE comment heartbeat, which also re-reads the log in case
	// a wake-up was lost. Default 15 s.
	Heartbeat time.Duration
	// StreamWriteTimeout bounds each write of an SSE stream (at most 64 KiB of frames); a client
	// that reads slower than that is disconnected (it resumes with Last-Event-ID). Default 10 s.
	StreamWriteTimeout time.Duration
	// StreamMaxLag is how far, in bytes of frames, a stream that has caught up with the log may
	// fall behind it again: a subscriber that reads slower than the session's log grows is
	// dropped once it is that far behind (it resumes with Last-Event-ID) rather than fed for as
	// long as its writes trickle through. Default 4 MiB.
	StreamMaxLag int
	// MaxStreamsPerSession and MaxStreamsPerTenant bound the SSE streams open on this server for
	// one session and for one tenant; beyond them a stream (or a message posted with Accept:
	// text/event-stream, before it is posted) answers 429 too_many_streams. Defaults 32 and 256.
	MaxStreamsPerSession int
	MaxStreamsPerTenant  int
	// StreamPage is how many events an SSE stream reads from the database at a time. Default 100.
	StreamPage int
	// StreamTailBuffer is how many recent events of a followed session a replica keeps for its
	// streams to share (tail.go). Default 2048.
	StreamTailBuffer int
	// CORSOrigins are the origins (scheme://host[:port], see ParseOrigins) whose pages may call
	// the API from a browser (cors.go). Default none.
	CORSOrigins []string
	// StreamTokenSecret signs stream tokens (tokens.go); every replica needs the same. Empty: a
	// random secret per Server, so only this process accepts its tokens.
	StreamTokenSecret []byte
	// StreamTokenPreviousSecrets are former secrets whose tokens are still accepted while a
	// rotation is under way; new tokens are signed with StreamTokenSecret only. Default none.
	StreamTokenPreviousSecrets [][]byte
	// StreamTokenTTL is how long a stream token opens streams. Default 5 minutes.
	StreamTokenTTL time.Duration
	// WriteTimeout bounds the writing of every response except SSE streams (which bound each
	// write by StreamWriteTimeout): a client that does not read its response cannot hold a
	// handler longer. Default 30 s.
	WriteTimeout time.Duration
	// PageBytes bounds the event data of one JSON page of events or history; a page holds at
	// least one event or message. Default 4 MiB.
	PageBytes int
	// BodyReadTimeout bounds the reading of a request body, from the start of the request: a
	// body that has not arrived by then answers 408 and the connection is closed. Default 10 s.
	BodyReadTimeout time.Duration
	// MaxUnauthenticated bounds the requests in flight that have not (yet) authenticated with an
	// API key or the admin token; beyond it requests answer 503 server_busy at once. GET /healthz
	// does not count. Default 256.
	MaxUnauthenticated int

	// Credentials stores the tenants' model provider keys (/v1/credentials). Nil: every
	// credential route answers 409 credentials_disabled.
	Credentials *pgstore.Credentials
	// Registry is the Prometheus registry GET /metrics serves; the server adds its HTTP series
	// and the Go and process collectors to it. Nil: a registry of the server's own, with its own
	// Metrics. Metrics are the operational series (pkg/telemetry) the server records (SSE bytes,
	// the streaming POST's time to first event); share them with the worker and the agent loop
	// so that one /metrics has them all (docs/observability.md).
	Registry *prometheus.Registry
	Metrics  *telemetry.Metrics
	// WebhookAllowHTTP and WebhookAllowPrivate let tenants register webhook endpoints with http://
	// URLs and on loopback, private or link-local hosts (tests, private deployments); the
	// delivery worker's sender needs the same settings. Defaults off.
	WebhookAllowHTTP    bool
	WebhookAllowPrivate bool
	// WebhookMaxEndpoints bounds a tenant's webhook endpoints. Default DefaultWebhookMaxEndpoints.
	WebhookMaxEndpoints int
	// Quotas, when set, are the tenants' limits (usage.go, docs/usage-and-quotas.md): the request
	// rate of every authenticated request, the session, stored-bytes and token quotas of
	// creates and posts, and the operator's GET/PUT /v1/tenants/{id}/limits. Nil: no limits.
	Quotas *pgstore.Quotas

	// MetricsToken, when set, is the bearer token GET /metrics requires (Authorization: Bearer
	// <token>; anything else answers 401). Empty: /metrics answers anyone who reaches it, so it
	// must be kept off the public network (docs/observability.md).
	MetricsToken string

	// Tracer, when not nil, traces every request with a server span (observe.go,
	// docs/observability.md); TraceTrustIngress lets an incoming traceparent be that span's
	// parent (otherwise it is only a link).
	Tracer            trace.Tracer
	TraceTrustIngress bool
}

func (c *Config) defaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.ImportMaxBytes <= 0 {
		c.ImportMaxBytes = DefaultImportMaxBytes
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 15 * time.Second
	}
	if c.StreamWriteTimeout <= 0 {
		c.StreamWriteTimeout = 10 * time.Second
	}
	if c.StreamMaxLag <= 0 {
		c.StreamMaxLag = 4 << 20
	}
	if c.MaxStreamsPerSession <= 0 {
		c.MaxStreamsPerSession = 32
	}
	if c.MaxStreamsPerTenant <= 0 {
		c.MaxStreamsPerTenant = 256
	}
	if c.StreamPage <= 0 {
		c.StreamPage = 100
	}
	if c.StreamTailBuffer <= 0 {
		c.StreamTailBuffer = 2048
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.PageBytes <= 0 {
		c.PageBytes = pgstore.DefaultHistoryBytes
	}
	if c.BodyReadTimeout <= 0 {
		c.BodyReadTimeout = 10 * time.Second
	}
	if c.MaxUnauthenticated <= 0 {
		c.MaxUnauthenticated = 256
	}
	if c.WebhookMaxEndpoints <= 0 {
		c.WebhookMaxEndpoints = DefaultWebhookMaxEndpoints
	}
}

// Server is the HTTP handler of dshd. It is safe for concurrent use.
type Server struct {
	cfg       Config
	logger    *slog.Logger
	metrics   *metrics
	router    chi.Router
	done      chan struct{} // closed by Close: streams end
	closeOnce sync.Once
	tokens    *streamTokens
	tails     *tails         // shared per-session readers of SSE streams
	unauth    chan struct{}  // a slot per request in flight that has not authenticated
	open      openStreams    // SSE streams open, per tenant and per session
	streamsWG sync.WaitGroup // detached streams (stream.go), which Close waits for
	closingMu sync.Mutex     // guards the fields below; orders streamsWG.Add before Close's Wait
	closing   bool
	detached  map[*connOut]struct{} // the connections of detached streams
}

// New returns a server with cfg's dependencies.
func New(cfg Config) *Server {
	cfg.defaults()
	s := &Server{cfg: cfg, logger: cfg.Logger, metrics: newMetrics(cfg.Registry, cfg.Metrics), done: make(chan struct{}),
		unauth: make(chan struct{}, cfg.MaxUnauthenticated),
		tails:  &tails{log: cfg.Log, hub: cfg.Hub, keep: cfg.StreamTailBuffer, m: map[uuid.UUID]*tail{}},
		tokens: newStreamTokens(cfg.StreamTokenSecret, cfg.StreamTokenPreviousSecrets, cfg.StreamTokenTTL)}
	s.router = s.routes()
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.router.ServeHTTP(w, r) }

// Publish hands the server a batch this process committed to a session's log (wire it with
// pgstore.Store.OnCommit): streams of the session on this server get it without reading the
// database. Safe for concurrent use; it never blocks on a client.
func (s *Server) Publish(tenantID, sessionID uuid.UUID, evs []eventlog.Event) {
	s.tails.publish(tenantID, sessionID, evs)
}

// Close ends every open SSE stream cleanly (the response completes after the frames already
// sent) and makes new streams end at once. Call it when the HTTP server starts shutting down
// (http.Server.RegisterOnShutdown), because Shutdown waits for handlers to return. Streams that
// took their connections over (stream.go), which Shutdown does not see, have ended when Close
// returns (a write in flight gets a second more). Idempotent.
func (s *Server) Close() {
	s.closingMu.Lock()
	s.closing = true
	// A detached stream stuck in a write to a client that does not read gets a second, not
	// StreamWriteTimeout, to finish it.
	for o := range s.detached {
		o.closeBy(time.Now().Add(time.Second))
	}
	s.closingMu.Unlock()
	s.closeOnce.Do(func() { close(s.done) })
	s.streamsWG.Wait()
}

// Routes lists every route the server serves as "METHOD /pattern", sorted, for checks that the
// documentation (openapi.yaml) covers them.
func (s *Server) Routes() []string {
	var out []string
	_ = chi.Walk(s.router, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		out = append(out, method+" "+metricsRoute(route))
		return nil
	})
	slices.Sort(out)
	return slices.Compact(out)
}

func (s *Server) routes() chi.Router {
	r := chi.NewRouter()
	r.Use(s.observe, s.cors, s.admit, s.writeDeadline, s.guardBody, s.limitBody)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, CodeNotFound, "no such endpoint: "+r.URL.Path)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, CodeMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path)
	})
	r.Get("/healthz", handleHealth)
	r.Get("/readyz", s.handleReady)
	r.Method(http.MethodGet, "/metrics", s.metricsGuard(s.metrics.handler()))
	r.Get("/openapi.yaml", handleOpenAPI)
	r.Method(http.MethodGet, "/", web.Handler())
	r.Route("/v1", func(r chi.Router) {
		r.With(s.adminOnly).Post("/tenants", tenantResource{tenants: s.cfg.Tenants}.handleTenantCreate)
		r.Group(func(r chi.Router) {
			r.Use(s.authenticate)
			r.Use(s.rateLimit) // usage.go: after authentication, before every tenant route
			r.Mount("/presets", presetResource{presets: s.cfg.Presets}.routes())
			r.Mount("/sessions", sessionResource{s: s}.routes())
			r.Get("/tools", s.handleToolList)
			r.Mount("/api-keys", apiKeyResource{tenants: s.cfg.Tenants}.routes())
			r.Mount("/credentials", credentialResource{creds: s.cfg.Credentials}.routes())
			r.Mount("/webhooks", hookResource{hooks: s.cfg.Log.Webhooks(), allowHTTP: s.cfg.WebhookAllowHTTP,
				allowPrivate: s.cfg.WebhookAllowPrivate, max: s.cfg.WebhookMaxEndpoints}.routes())
			r.Get("/usage", s.handleUsage)
		})
		r.With(s.adminOnly).Get("/tenants/{id}/usage", s.handleTenantUsage)
		r.With(s.adminOnly).Get("/tenants/{id}/limits", s.handleLimitsGet)
		r.With(s.adminOnly).Put("/tenants/{id}/limits", s.handleLimitsPut)
	})
	return r
}

func handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if err := s.cfg.Ready(ctx); err != nil {
			logger(r).Warn("not ready", slog.String("error", err.Error()))
			writeProblem(w, CodeNotReady, "not ready: "+err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(dshd.OpenAPI)
}

// metricsRoute is the route label of a chi pattern: mounted roots lose their trailing slash.
func metricsRoute(pattern string) string {
	if len(pattern) > 1 {
		return strings.TrimSuffix(pattern, "/")
	}
	return pattern
}
