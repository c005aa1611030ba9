package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/migrations"
	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/approval"
	"github.com/dshd/dshd/pkg/codemode"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/telemetry"
	"github.com/dshd/dshd/pkg/webhook"
	"github.com/dshd/dshd/pkg/worker"
)

// Main is the program: the one place that knows every concrete type. Tests reuse it on port :0
// (set Config, call Run, talk to URL(), call Close).
type Main struct {
	Config Config
	Logger *slog.Logger

	pool   *pgxpool.Pool
	db     *sql.DB // database/sql view of pool, for goose's readiness check
	hub    *pgstore.Hub
	worker *worker.Service
	hooks  *worker.Deliverer
	api    *api.Server
	server *http.Server
	ln     net.Listener
	served chan error
	closed bool
	// traceShutdown flushes and stops the trace exporter (a no-op when tracing is off).
	traceShutdown func(context.Context) error
}

// NewMain returns a program with the default configuration and a discarding logger.
func NewMain() *Main {
	cfg, _ := ParseConfig(func(string) string { return "" })
	return &Main{Config: cfg, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))}
}

// Run applies pending migrations, connects, starts the LISTEN hub and starts serving HTTP on
// Config.Addr. It returns once the server is listening; call Close to stop it, also after an
// error.
func (m *Main) Run(ctx context.Context) error {
	if m.closed {
		return errClosed
	}
	applied, err := migrations.Up(ctx, m.Config.DatabaseURL)
	if err != nil {
		return err
	}
	if len(applied) > 0 {
		m.Logger.Info("migrations applied", slog.Any("versions", applied))
	}
	if m.pool, err = pgxpool.New(ctx, m.Config.DatabaseURL); err != nil {
		return fmt.Errorf("dshd: database: %w", err)
	}
	m.db = stdlib.OpenDBFromPool(m.pool)
	// One registry serves /metrics: the HTTP series, the operational ones (pkg/telemetry) that
	// the agent loop, the worker, the store and the approvals record, and the pool and queue
	// collectors. Log lines written within a traced turn carry its trace and span ids.
	m.Logger = slog.New(telemetry.LogHandler(m.Logger.Handler()))
	registry := prometheus.NewRegistry()
	metrics := telemetry.NewMetrics(registry, telemetry.Options{Models: m.Config.MetricsModels})
	tp, shutdown, err := telemetry.NewTracerProvider(ctx, telemetry.TraceConfig{URL: m.Config.TracesURL})
	if err != nil {
		return err
	}
	m.traceShutdown = shutdown
	var tracer trace.Tracer
	if tp != nil {
		tracer = telemetry.Tracer(tp)
		m.Logger.Info("tracing: exporting turn traces over OTLP/HTTP", slog.String("url", m.Config.TracesURL))
	}
	m.hub = pgstore.NewHub(m.pool, pgstore.HubConfig{Logger: m.Logger})
	// The hub lives until Close, not until ctx: streams need it during the graceful shutdown.
	if err := m.hub.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	logStore := pgstore.NewStore(m.pool, pgstore.StoreConfig{Logger: m.Logger, RetryUnavailable: m.Config.DBRetry, Metrics: metrics,
		SecretKeys: m.Config.CredentialKeys})
	registry.MustRegister(logStore.Collectors()...)
	wt, err := m.Config.workspaceTools(m.Logger)
	if err != nil {
		return err
	}
	var workspace []agents.WorkspaceTools
	var workspaces api.Workspaces
	if wt != nil {
		workspace, workspaces = append(workspace, *wt), wt.Workspaces
	}
	tools, err := agents.BuiltinTools(m.Config.DemoTools, workspace...)
	if err != nil {
		return err
	}
	codeRuntime, err := codemode.New(codemode.Config{Logger: m.Logger, Metrics: metrics, MaxConcurrent: m.Config.CPU.CodeMaxConcurrent})
	if err != nil {
		return err
	}
	credentials := pgstore.NewCredentials(m.pool, m.Config.CredentialKeys)
	if m.Config.CredentialKeys == nil {
		m.Logger.Info("tenant credentials are disabled: set DSHD_CREDENTIAL_KEYS to enable them")
	}
	// The agents fill each ask's timeout and policy in (registry.ApprovalRequest), so the
	// approval service is built before them and needs no reference back.
	approvals := approval.New(approval.Config{Metrics: metrics})
	ag, err := agents.New(agents.Config{Tools: tools, DeepSeekAPIKey: m.Config.DeepSeekAPIKey, Approvals: approvals,
		ModelHosts: m.Config.ModelHosts, ScriptedDisabled: !m.Config.ScriptedModel,
		DefaultToolTimeoutMs: int(m.Config.ToolTimeout.Milliseconds()), CodeRuntime: codeRuntime,
		PolicyWebhooks: agents.PolicyWebhooks{Key: []byte(m.Config.PolicyWebhookKey),
			AllowHTTP: m.Config.PolicyWebhookHTTP, AllowPrivate: m.Config.PolicyWebhookPrivate},
		Logger: m.Logger, Loop: agentloop.Config{Logger: m.Logger, Metrics: metrics, Tracer: tracer},
		Credentials: credentials, NoOperatorKeyFallback: !m.Config.OperatorKeyFallback,
		Workspace: wt, SandboxNetworkDisabled: !m.Config.SandboxNetwork})
	if err != nil {
		return err
	}
	// Presets are validated by what the agents can run (model hosts, scripted on or off).
	presets := pgstore.NewPresets(m.pool, ag.Rules())
	limits, maxTurns := m.Config.TenantLimits, m.Config.TenantMaxTurns
	limits.MaxConcurrentTurns = &maxTurns
	quotas := pgstore.NewQuotas(m.pool, pgstore.QuotasConfig{Defaults: limits})
	m.worker, err = worker.New(worker.Config{Store: logStore, Hub: m.hub, Presets: presets, Quotas: quotas,
		Agents: ag, LeaseTTL: m.Config.LeaseTTL, MaxWorkers: m.Config.MaxTurns,
		MaxTenantTurns: m.Config.TenantMaxTurns, Approvals: approvals, Logger: m.Logger, DrainFinish: m.Config.DrainFinish,
		InboxMaxMessages: m.Config.InboxMaxMessages, InboxMaxBytes: m.Config.InboxMaxBytes,
		SessionPosts: postRate(m.Config.SessionPostRate, m.Config.SessionPostBurst),
		TenantPosts:  postRate(m.Config.TenantPostRate, m.Config.TenantPostBurst)})
	if err != nil {
		return err
	}
	if err := m.worker.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	m.hooks = m.Config.Webhooks.deliverer(logStore, m.Logger)
	m.hooks.Start(context.WithoutCancel(ctx))
	m.api = api.New(api.Config{
		Tenants:        pgstore.NewTenants(m.pool),
		Presets:        presets,
		Log:            logStore,
		Hub:            m.hub,
		Turns:          m.worker,
		Prompts:        agents.Prompter{Agents: ag, Presets: presets},
		Workspaces:     workspaces,
		Ready:          m.ready,
		Logger:         m.Logger,
		AdminToken:     m.Config.AdminToken,
		MaxBodyBytes:   m.Config.MaxBodyBytes,
		ImportMaxBytes: m.Config.ImportMaxBytes,
		Heartbeat:      m.Config.Heartbeat,

		CORSOrigins:       m.Config.CORSOrigins,
		StreamTokenSecret: []byte(m.Config.StreamTokenSecret),
		StreamTokenTTL:    m.Config.StreamTokenTTL,
		WriteTimeout:      m.Config.WriteTimeout,
		PageBytes:         m.Config.PageBytes,

		BodyReadTimeout:    m.Config.BodyReadTimeout,
		MaxUnauthenticated: m.Config.MaxUnauthenticated,

		StreamWriteTimeout:   m.Config.StreamWriteTimeout,
		StreamMaxLag:         m.Config.StreamMaxLag,
		MaxStreamsPerSession: m.Config.MaxStreamsPerSession,
		MaxStreamsPerTenant:  m.Config.MaxStreamsPerTenant,

		Credentials:         credentials,
		Registry:            registry,
		Metrics:             metrics,
		WebhookAllowHTTP:    m.Config.Webhooks.AllowHTTP,
		WebhookAllowPrivate: m.Config.Webhooks.AllowPrivate,
		WebhookMaxEndpoints: m.Config.Webhooks.MaxEndpoints,
		Quotas:              quotas,

		MetricsToken: m.Config.MetricsToken,

		Tracer:            tracer,
		TraceTrustIngress: m.Config.Tracing.TrustIngress,

		// The former values of a rotation (config.go parsePrevious).
		AdminTokenPrevious:         m.Config.AdminTokenPrevious,
		StreamTokenPreviousSecrets: bytesList(m.Config.StreamTokenSecretPrevious),
	})
	if m.Config.StreamTokenSecret == "" {
		m.Logger.Info("stream tokens are signed with a random secret of this process; set DSHD_STREAM_TOKEN_SECRET to one value on every replica")
	}
	logStore.OnCommit(m.api.Publish)
	if m.ln, err = net.Listen("tcp", m.Config.Addr); err != nil {
		return fmt.Errorf("dshd: listen: %w", err)
	}
	// Request bodies and responses get their deadlines per request from the API server (a body
	// read bound, a write bound for everything but SSE streams), so there is no ReadTimeout or
	// WriteTimeout here; the head of a request is bounded by ReadHeaderTimeout.
	m.server = &http.Server{Handler: m.api, ReadHeaderTimeout: m.Config.ReadHeaderTimeout, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(m.Logger.Handler(), slog.LevelWarn)}
	// Shutdown waits for handlers to return; SSE handlers return when the API server closes.
	m.server.RegisterOnShutdown(m.api.Close)
	m.served = make(chan error, 1)
	go func() { m.served <- m.server.Serve(m.ln) }()
	return nil
}

// ready reports whether the database answers and every migration is applied. Its errors are
// shown on /readyz, so they say what is wrong without the driver's details (which are logged).
func (m *Main) ready(ctx context.Context) error {
	if err := m.pool.Ping(ctx); err != nil {
		m.Logger.Warn("readiness: database unreachable", slog.String("error", err.Error()))
		return errors.New("database unreachable")
	}
	pending, err := migrations.Pending(ctx, m.db)
	if err != nil {
		m.Logger.Warn("readiness: migration status", slog.String("error", err.Error()))
		return errors.New("migration status unknown")
	}
	if pending {
		return errors.New("migrations pending")
	}
	return nil
}

// Addr is the address the server listens on (with the real port when Config.Addr used :0).
func (m *Main) Addr() string {
	if m.ln == nil {
		return ""
	}
	return m.ln.Addr().String()
}

// URL is the base URL of the server, for tests and tools.
func (m *Main) URL() string {
	host, port, _ := net.SplitHostPort(m.Addr())
	if host == "" || host == "::" || host == "0.0.0.0" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// Close shuts down gracefully within Config.ShutdownTimeout: it stops accepting connections, ends
// SSE streams (with a retry hint), waits for requests in flight, drains the worker (running turns
// finish or hand over at a step boundary, worker.Service.Stop), then stops the hub and closes the
// database. It is
// safe to call after a failed Run, and more than once.
func (m *Main) Close() error {
	if m.closed {
		return nil
	}
	m.closed = true
	var errs []error
	// One deadline for every stage: the process exits within ShutdownTimeout of the signal (the
	// worker's drain leaves the last second of it to what follows).
	deadline := time.Now().Add(m.Config.ShutdownTimeout)
	if m.server != nil {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		if err := m.server.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("dshd: shutdown: %w", err))
			_ = m.server.Close()
		}
		if err := <-m.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
		// Shutdown does not wait for the SSE streams that took their connections over; Close
		// does (it ended them when Shutdown began).
		m.api.Close()
	} else if m.ln != nil {
		_ = m.ln.Close()
	}
	if m.worker != nil {
		// Running turns end aborted (disposed) and their leases are released; queued work stays
		// in the queue for the other replicas.
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		if err := m.worker.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("dshd: stop worker: %w", err))
		}
	}
	if m.traceShutdown != nil {
		// The spans of the turns that ended (the worker has stopped) are sent before exit.
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		if err := m.traceShutdown(ctx); err != nil {
			m.Logger.Warn("tracing: flushing spans at shutdown failed", slog.String("error", err.Error()))
		}
	}
	if m.hooks != nil {
		// Attempts in flight finish (each is bounded by DSHD_WEBHOOK_TIMEOUT) or are cancelled;
		// a cancelled one is attempted again after its lease, by any replica.
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		_ = m.hooks.Stop(ctx)
	}
	if m.hub != nil {
		m.hub.Stop()
	}
	if m.db != nil {
		_ = m.db.Close()
	}
	if m.pool != nil {
		m.pool.Close()
	}
	return errors.Join(errs...)
}

// deliverer is the tenant webhooks' delivery worker of these settings.
func (w WebhookSettings) deliverer(store *pgstore.Store, logger *slog.Logger) *worker.Deliverer {
	sender := webhook.NewSender(webhook.SenderConfig{AllowHTTP: w.AllowHTTP, AllowPrivate: w.AllowPrivate, Timeout: w.Timeout})
	return worker.NewDeliverer(worker.WebhookConfig{Store: store, Sender: sender, Workers: w.Workers, Poll: w.Poll,
		Lease: w.Timeout + 30*time.Second, Retention: w.Retention, Logger: logger,
		Schedule: webhook.Schedule{Base: w.RetryBase, Max: w.RetryMax, Attempts: w.MaxAttempts}})
}

// bytesList converts a list of strings (secrets) to byte slices.
func bytesList(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}
