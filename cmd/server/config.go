package main

import (
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/pkg/secretbox"
	"github.com/dshd/dshd/pkg/telemetry"
	"github.com/dshd/dshd/pkg/tenant"
	"github.com/dshd/dshd/pkg/worker"
)

// Config is the server's configuration, read from the environment. Every setting has a default.
type Config struct {
	// DatabaseURL (DATABASE_URL) is the PostgreSQL connection string. Default: the development
	// cluster of `make run`, postgres://postgres@127.0.0.1:55432/dshd?sslmode=disable.
	DatabaseURL string
	// Addr (DSHD_ADDR) is the listen address. Default ":8080"; ":0" picks a free port.
	Addr string
	// AdminToken (DSHD_ADMIN_TOKEN) authorizes POST /v1/tenants. Default empty: tenant
	// administration is disabled. `make run` sets "dev-admin-token".
	AdminToken string
	// AdminTokenPrevious (DSHD_ADMIN_TOKEN_PREVIOUS, comma-separated) are former admin tokens
	// still accepted beside AdminToken during a rotation (docs/credentials-and-keys.md), each at
	// least 32 bytes. Default none.
	AdminTokenPrevious []string
	// ModelHosts (DSHD_MODEL_HOSTS, comma-separated) are the hosts a preset's model.baseUrl may
	// point at, a guard against server-side request forgery; "*" allows any. Default
	// "api.deepseek.com".
	ModelHosts []string
	// DemoTools (DSHD_DEMO_TOOLS=1) adds the harmless demo tool pack (echo, sleep, wait, fail) for tests,
	// benchmarks and first runs. Default off; `make run` turns it on. Used by the agent loop.
	DemoTools bool
	// DeepSeekAPIKey (DEEPSEEK_API_KEY) is the key of the default DeepSeek provider. Default
	// empty: `make run`'s default preset uses the scripted model, so everything works offline.
	DeepSeekAPIKey string
	// Heartbeat (DSHD_SSE_HEARTBEAT, a Go duration) is the interval of the SSE comment heartbeat.
	// Default 15s.
	Heartbeat time.Duration
	// MaxBodyBytes (DSHD_MAX_BODY_BYTES) caps request bodies; larger ones answer 413. Default
	// 1048576 (1 MiB).
	MaxBodyBytes int64
	// ShutdownTimeout (DSHD_SHUTDOWN_TIMEOUT, a Go duration) bounds the graceful shutdown on
	// SIGINT or SIGTERM: the process exits within it. Default 10s.
	ShutdownTimeout time.Duration
	// DrainFinish (DSHD_DRAIN_FINISH, a Go duration) is how long a stopping replica lets its
	// running turns go on toward their end before it hands them over at their next step boundary
	// (docs/rules.md, E6). Default 5s; at most DSHD_SHUTDOWN_TIMEOUT.
	DrainFinish time.Duration
	// LogLevel (DSHD_LOG_LEVEL: debug, info, warn, error) of the JSON logs. Default info.
	LogLevel slog.Level
	// LeaseTTL (DSHD_LEASE_TTL, a Go duration) is how long a session's run lease lasts without
	// renewal: after a replica dies, another takes over its sessions within about this long.
	// Default 10s.
	LeaseTTL time.Duration
	// DBRetry (DSHD_DB_RETRY, a Go duration) is how long a running turn's write to the log keeps
	// retrying while the database is unavailable (refused or lost connections, a restart) before
	// the turn fails: a shorter outage only pauses running turns. Default 30s.
	DBRetry time.Duration
	// MaxTurns (DSHD_MAX_TURNS) is how many turns this replica runs at once. Default 100.
	MaxTurns int
	// TenantMaxTurns (DSHD_TENANT_MAX_TURNS) is how many turns one tenant runs at once on all
	// replicas together, so that no tenant starves the others. Default 20.
	TenantMaxTurns int
	// InboxMaxMessages and InboxMaxBytes (DSHD_INBOX_MAX_MESSAGES, DSHD_INBOX_MAX_BYTES) bound a
	// session's pending inbox, both lists together (the messages' JSON): a post beyond them
	// answers 429 inbox_full, except a waking post to an idle session. Defaults 100 and 8388608
	// (8 MiB).
	InboxMaxMessages int
	InboxMaxBytes    int64
	// SessionPostRate and SessionPostBurst (DSHD_SESSION_POST_RATE, posts a second, 0: no
	// limit; DSHD_SESSION_POST_BURST) bound how fast messages are posted to one session, on each
	// replica (a token bucket; beyond it a post answers 429 with Retry-After). Defaults 10 and 20.
	SessionPostRate  float64
	SessionPostBurst int
	// TenantPostRate and TenantPostBurst (DSHD_TENANT_POST_RATE, DSHD_TENANT_POST_BURST) bound
	// the posts of one tenant to all its sessions together, likewise. Defaults 200 and 400.
	TenantPostRate  float64
	TenantPostBurst int
	// ScriptedModel (DSHD_SCRIPTED_MODEL) offers the scripted test model to presets. Default on
	// (the offline first run uses it); a hosted deployment may turn it off.
	ScriptedModel bool
	// ToolTimeout (DSHD_TOOL_TIMEOUT, a Go duration) bounds every tool that sets no timeout of its
	// own (extension E2, docs/rules.md). Default 10m.
	ToolTimeout time.Duration
	// WorkspaceRoot (DSHD_WORKSPACE_ROOT) holds the sessions' workspaces, <root>/<session id>;
	// setting it adds the workspace tools (bash, read, write, edit, glob, grep, web_fetch).
	// Several replicas must share it (a network filesystem). Default empty: no workspace tools.
	WorkspaceRoot string
	// WorkspaceQuota (DSHD_WORKSPACE_QUOTA, bytes) bounds each workspace for the file tools.
	// Default 1073741824 (1 GiB).
	WorkspaceQuota int64
	// Shell (DSHD_SHELL) is bash's provider: "bwrap" (bubblewrap sandbox; the server refuses to
	// start when it cannot run), "local" (on the host, no isolation: single-user development
	// only) or "off" (no bash tool). Default bwrap. Used only with a WorkspaceRoot.
	Shell string
	// SandboxUser (DSHD_SANDBOX_USER, uid:gid) is whom bwrap sandboxes run as when the server runs
	// as root. Default 65534:65534 (nobody).
	SandboxUser [2]int
	// WebAllowPrivate (DSHD_WEB_ALLOW_PRIVATE=1) lets web_fetch reach loopback, private and
	// link-local addresses. Default off.
	WebAllowPrivate bool
	// SandboxNetwork (DSHD_SANDBOX_NETWORK) lets presets give bash's sandbox the egress network
	// (tools.bash.network: public addresses only, never the host, its gateways or a private
	// range; docs/sandbox.md): 1 allows it. Default 0, which forbids it: such presets are refused
	// (400), and ones stored before run without the network. Tenant code reaching the internet
	// from the operator's addresses is the operator's choice. With 1 the server checks at startup
	// that the egress network runs (pasta, nft) and logs a warning when it does not.
	SandboxNetwork bool
	// SandboxEgressDeny (DSHD_SANDBOX_EGRESS_DENY) is a comma-separated list of CIDR ranges (or
	// single addresses) the egress network refuses besides the non-public ranges and the
	// server's own addresses: in a container "the host" is the container's network namespace,
	// so the node's public addresses (a kubelet on :10250) and the operator's other public
	// services belong here (docs/sandbox.md). Default empty.
	SandboxEgressDeny []netip.Prefix
	// TenantWorkspaceBytes (DSHD_TENANT_WORKSPACE_BYTES) bounds the bytes of all the workspaces of
	// one tenant: write and edit refuse to go over it (FS_QUOTA_EXCEEDED), bash reports a command
	// that did. Default 0: no bound.
	TenantWorkspaceBytes int64
	// SandboxMemoryBytes (DSHD_SANDBOX_MEMORY_BYTES) bounds each bwrap command's memory as a whole
	// (its processes and its /tmp and /dev/shm) with a memory cgroup, where the host gives the
	// server a writable one. 0 (the default) is sandbox.DefaultMemoryBytes (1 GiB); negative (the
	// setting 0): no memory cgroup.
	SandboxMemoryBytes int64
	// PolicyWebhookKey (DSHD_POLICY_WEBHOOK_KEY) is the key every preset's policy webhook signing
	// secret is derived from; at least 32 bytes. Default empty: policy webhooks are disabled
	// (presets naming one are refused).
	PolicyWebhookKey string
	// PolicyWebhookHTTP (DSHD_POLICY_WEBHOOK_ALLOW_HTTP=1) allows http:// policy webhooks, for
	// tests. Default off: https only.
	PolicyWebhookHTTP bool
	// PolicyWebhookPrivate (DSHD_POLICY_WEBHOOK_ALLOW_PRIVATE=1) allows policy webhooks on
	// loopback, private and link-local addresses, for tests and private deployments. Default
	// off: every address is checked when it is dialled.
	PolicyWebhookPrivate bool
	// CORSOrigins (DSHD_CORS_ORIGINS, comma-separated origins such as https://app.example.com)
	// may call the API from browser pages of other origins. Default none.
	CORSOrigins []string
	// StreamTokenSecret (DSHD_STREAM_TOKEN_SECRET, at least 32 bytes) signs the stream tokens
	// browsers follow a session's events with. Default empty: a random secret per process, so
	// replicas behind one load balancer need the same configured secret.
	StreamTokenSecret string
	// StreamTokenSecretPrevious (DSHD_STREAM_TOKEN_SECRET_PREVIOUS, comma-separated, each at
	// least 32 bytes) are former secrets whose tokens are still accepted during a rotation; new
	// tokens are signed with StreamTokenSecret only. Default none.
	StreamTokenSecretPrevious []string
	// StreamTokenTTL (DSHD_STREAM_TOKEN_TTL, a Go duration up to 1h) is how long a stream token
	// opens streams. Default 5m.
	StreamTokenTTL time.Duration
	// WriteTimeout (DSHD_WRITE_TIMEOUT, a Go duration) bounds the writing of every response
	// except SSE streams: a client that does not read is disconnected. Default 30s.
	WriteTimeout time.Duration
	// PageBytes (DSHD_PAGE_BYTES) bounds the event data of one page of events or history.
	// Default 4194304 (4 MiB).
	PageBytes int
	// ReadHeaderTimeout (DSHD_READ_HEADER_TIMEOUT, a Go duration) bounds the reading of a
	// request's head: a connection that trickles its headers is closed then. Default 5s.
	ReadHeaderTimeout time.Duration
	// BodyReadTimeout (DSHD_BODY_READ_TIMEOUT, a Go duration) bounds the reading of a request
	// body from the start of the request; a body that has not arrived answers 408. Default 10s.
	BodyReadTimeout time.Duration
	// MaxUnauthenticated (DSHD_MAX_UNAUTHENTICATED) bounds the requests in flight that have not
	// authenticated; beyond it requests answer 503 server_busy. Default 256.
	MaxUnauthenticated int
	// StreamWriteTimeout (DSHD_SSE_WRITE_TIMEOUT, a Go duration) bounds each write of an SSE
	// stream; a client that does not take it in time is disconnected. Default 10s.
	StreamWriteTimeout time.Duration
	// StreamMaxLag (DSHD_SSE_MAX_LAG) is how many bytes of frames a caught-up SSE stream may fall
	// behind its session's log before it is dropped. Default 4194304 (4 MiB).
	StreamMaxLag int
	// MaxStreamsPerSession (DSHD_SSE_MAX_PER_SESSION) and MaxStreamsPerTenant
	// (DSHD_SSE_MAX_PER_TENANT) bound the SSE streams open on this replica per session and per
	// tenant; beyond them streams answer 429 too_many_streams. Defaults 32 and 256.
	MaxStreamsPerSession int
	MaxStreamsPerTenant  int
	// CPUProfile (DSHD_CPU_PROFILE) is a file that `serve` writes a Go CPU profile to, from start
	// until shutdown, for `go tool pprof` (cmd/loadgen passes it through). Default empty: no
	// profile.
	CPUProfile string
	// CredentialKeys (DSHD_CREDENTIAL_KEYS: comma-separated id:base64key entries of 32-byte keys,
	// the active key first) are the operator's key encryption keys of tenant credentials
	// (docs/credentials-and-keys.md): new credentials are wrapped by the first, the others still
	// unwrap older ones until `dshd rewrap-credentials` has moved them. Default empty:
	// credentials are disabled (POST /v1/credentials answers 409 credentials_disabled).
	CredentialKeys *secretbox.Keyring
	// OperatorKeyFallback (DSHD_OPERATOR_KEY_FALLBACK) lends DEEPSEEK_API_KEY to presets that name
	// no credential and call DeepSeek's endpoint. Default on (1); 0 makes such presets fail their
	// turns with INVALID_CREDENTIAL, so every tenant pays with its own key.
	OperatorKeyFallback bool
	// TracesURL is where turn traces are exported over OTLP/HTTP (docs/observability.md): the
	// base URL DSHD_OTLP_ENDPOINT plus /v1/traces, else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as
	// it is, else OTEL_EXPORTER_OTLP_ENDPOINT plus /v1/traces. Default empty: no tracing (also
	// when OTEL_SDK_DISABLED=true).
	TracesURL string
	// MetricsModels (DSHD_METRICS_MODELS, comma-separated) are the model names that get their
	// own gen_ai_request_model label value besides DeepSeek's (telemetry.DefaultModels); any
	// other reads "other". Default empty: only DeepSeek's.
	MetricsModels []string

	// TenantLimits are the server's default tenant limits (docs/usage-and-quotas.md), for every
	// tenant whose own limits (PUT /v1/tenants/{id}/limits) leave a field null:
	// DSHD_TENANT_RPS (requests a second on the HTTP API, all replicas together) and
	// DSHD_TENANT_BURST (default: the rate rounded up), DSHD_TENANT_TOKENS_PER_DAY,
	// DSHD_TENANT_MAX_SESSIONS, DSHD_TENANT_MAX_LOG_BYTES. Each defaults to 0: no limit.
	// maxConcurrentTurns' default is DSHD_TENANT_MAX_TURNS (TenantMaxTurns, filled in by Run).
	TenantLimits tenant.Limits

	// MetricsToken (DSHD_METRICS_TOKEN), when set, is the bearer token GET /metrics requires.
	// Default empty: /metrics answers anyone who reaches it (keep it off the public network).
	MetricsToken string

	// Webhooks are the settings of tenant webhooks (docs/webhooks.md).
	Webhooks WebhookSettings
	// CPU bounds the concurrent run_code programs and bash commands (cpu_config.go).
	CPU CPUSettings
}

// WebhookSettings configure tenant webhooks: which endpoints may be registered and how their
// deliveries are attempted (docs/webhooks.md).
type WebhookSettings struct {
	// AllowHTTP (DSHD_WEBHOOK_ALLOW_HTTP=1) allows http:// endpoints, for tests. Default off:
	// https only.
	AllowHTTP bool
	// AllowPrivate (DSHD_WEBHOOK_ALLOW_PRIVATE=1) allows endpoints on loopback, private and
	// link-local addresses, for tests and private deployments. Default off: the URL's host and
	// every address a delivery dials are checked.
	AllowPrivate bool
	// MaxEndpoints (DSHD_WEBHOOK_MAX_ENDPOINTS) bounds a tenant's endpoints. Default 20.
	MaxEndpoints int
	// Timeout (DSHD_WEBHOOK_TIMEOUT, a Go duration) bounds one delivery attempt. Default 10s.
	Timeout time.Duration
	// Workers (DSHD_WEBHOOK_WORKERS) bounds the attempts one replica makes at once. Default 16.
	Workers int
	// Poll (DSHD_WEBHOOK_POLL, a Go duration) is how often a replica looks for due deliveries.
	// Default 250ms.
	Poll time.Duration
	// RetryBase, RetryMax and MaxAttempts (DSHD_WEBHOOK_RETRY_BASE, DSHD_WEBHOOK_RETRY_MAX, Go
	// durations; DSHD_WEBHOOK_MAX_ATTEMPTS) are the retry schedule: the wait after failed attempt
	// n is RetryBase·2^(n-1), at most RetryMax, jittered into its upper half; after MaxAttempts
	// attempts the delivery has failed. Defaults 5s, 1h and 12.
	RetryBase   time.Duration
	RetryMax    time.Duration
	MaxAttempts int
	// Retention (DSHD_WEBHOOK_RETENTION, a Go duration) is how long delivered and failed
	// deliveries stay in the delivery log. Default 168h (7 days).
	Retention time.Duration
}

// DefaultDatabaseURL is the database of the `make run` development cluster (cmd/server devdb).
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:55432/dshd?sslmode=disable"

// ParseConfig reads the configuration from getenv (os.Getenv in main, a map in tests).
func ParseConfig(getenv func(string) string) (Config, error) {
	env := func(name, def string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		return def
	}
	c := Config{
		DatabaseURL:    env("DATABASE_URL", DefaultDatabaseURL),
		Addr:           env("DSHD_ADDR", ":8080"),
		AdminToken:     getenv("DSHD_ADMIN_TOKEN"),
		ModelHosts:     splitList(env("DSHD_MODEL_HOSTS", "api.deepseek.com")),
		DeepSeekAPIKey: getenv("DEEPSEEK_API_KEY"),
		CPUProfile:     strings.TrimSpace(getenv("DSHD_CPU_PROFILE")),
	}
	var err error
	if c.CORSOrigins, err = api.ParseOrigins(splitList(getenv("DSHD_CORS_ORIGINS"))); err != nil {
		return Config{}, fmt.Errorf("DSHD_CORS_ORIGINS: %w", err)
	}
	if c.StreamTokenSecret = getenv("DSHD_STREAM_TOKEN_SECRET"); c.StreamTokenSecret != "" && len(c.StreamTokenSecret) < 32 {
		return Config{}, fmt.Errorf("DSHD_STREAM_TOKEN_SECRET must be at least 32 bytes")
	}
	if err := c.parsePrevious(getenv); err != nil {
		return Config{}, err
	}
	if c.StreamTokenTTL, err = parseDuration("DSHD_STREAM_TOKEN_TTL", env("DSHD_STREAM_TOKEN_TTL", "5m")); err != nil || c.StreamTokenTTL > time.Hour {
		return Config{}, fmt.Errorf("DSHD_STREAM_TOKEN_TTL must be a positive Go duration of at most 1h")
	}
	if c.DemoTools, err = parseBool("DSHD_DEMO_TOOLS", env("DSHD_DEMO_TOOLS", "0")); err != nil {
		return Config{}, err
	}
	if c.Heartbeat, err = parseDuration("DSHD_SSE_HEARTBEAT", env("DSHD_SSE_HEARTBEAT", "15s")); err != nil {
		return Config{}, err
	}
	if c.ShutdownTimeout, err = parseDuration("DSHD_SHUTDOWN_TIMEOUT", env("DSHD_SHUTDOWN_TIMEOUT", "10s")); err != nil {
		return Config{}, err
	}
	if c.DrainFinish, err = parseDuration("DSHD_DRAIN_FINISH", env("DSHD_DRAIN_FINISH", "5s")); err != nil || c.DrainFinish > c.ShutdownTimeout {
		return Config{}, fmt.Errorf("DSHD_DRAIN_FINISH must be a positive Go duration of at most DSHD_SHUTDOWN_TIMEOUT")
	}
	if c.MaxBodyBytes, err = strconv.ParseInt(env("DSHD_MAX_BODY_BYTES", "1048576"), 10, 64); err != nil || c.MaxBodyBytes < 1 {
		return Config{}, fmt.Errorf("DSHD_MAX_BODY_BYTES must be a positive integer")
	}
	if c.LeaseTTL, err = parseDuration("DSHD_LEASE_TTL", env("DSHD_LEASE_TTL", "10s")); err != nil {
		return Config{}, err
	}
	if c.DBRetry, err = parseDuration("DSHD_DB_RETRY", env("DSHD_DB_RETRY", "30s")); err != nil {
		return Config{}, err
	}
	if c.MaxTurns, err = strconv.Atoi(env("DSHD_MAX_TURNS", "100")); err != nil || c.MaxTurns < 1 {
		return Config{}, fmt.Errorf("DSHD_MAX_TURNS must be a positive integer")
	}
	if c.TenantMaxTurns, err = strconv.Atoi(env("DSHD_TENANT_MAX_TURNS", "20")); err != nil || c.TenantMaxTurns < 1 {
		return Config{}, fmt.Errorf("DSHD_TENANT_MAX_TURNS must be a positive integer")
	}
	if c.InboxMaxMessages, err = strconv.Atoi(env("DSHD_INBOX_MAX_MESSAGES", "100")); err != nil || c.InboxMaxMessages < 1 {
		return Config{}, fmt.Errorf("DSHD_INBOX_MAX_MESSAGES must be a positive integer")
	}
	if c.InboxMaxBytes, err = strconv.ParseInt(env("DSHD_INBOX_MAX_BYTES", "8388608"), 10, 64); err != nil || c.InboxMaxBytes < 1 {
		return Config{}, fmt.Errorf("DSHD_INBOX_MAX_BYTES must be a positive integer")
	}
	if c.SessionPostRate, err = parseRate("DSHD_SESSION_POST_RATE", env("DSHD_SESSION_POST_RATE", "10")); err != nil {
		return Config{}, err
	}
	if c.SessionPostBurst, err = strconv.Atoi(env("DSHD_SESSION_POST_BURST", "20")); err != nil || c.SessionPostBurst < 1 {
		return Config{}, fmt.Errorf("DSHD_SESSION_POST_BURST must be a positive integer")
	}
	if c.TenantPostRate, err = parseRate("DSHD_TENANT_POST_RATE", env("DSHD_TENANT_POST_RATE", "200")); err != nil {
		return Config{}, err
	}
	if c.TenantPostBurst, err = strconv.Atoi(env("DSHD_TENANT_POST_BURST", "400")); err != nil || c.TenantPostBurst < 1 {
		return Config{}, fmt.Errorf("DSHD_TENANT_POST_BURST must be a positive integer")
	}
	if c.ScriptedModel, err = parseBool("DSHD_SCRIPTED_MODEL", env("DSHD_SCRIPTED_MODEL", "1")); err != nil {
		return Config{}, err
	}
	if c.ToolTimeout, err = parseDuration("DSHD_TOOL_TIMEOUT", env("DSHD_TOOL_TIMEOUT", "10m")); err != nil {
		return Config{}, err
	}
	if err := c.parseTools(env); err != nil {
		return Config{}, err
	}
	if err := c.parseSandbox(env); err != nil {
		return Config{}, err
	}
	if err := c.parseSandboxMemory(env); err != nil {
		return Config{}, err
	}
	c.PolicyWebhookKey = strings.TrimSpace(getenv("DSHD_POLICY_WEBHOOK_KEY"))
	if c.PolicyWebhookKey != "" && len(c.PolicyWebhookKey) < 32 {
		return Config{}, fmt.Errorf("DSHD_POLICY_WEBHOOK_KEY must be at least 32 bytes")
	}
	if c.PolicyWebhookHTTP, err = parseBool("DSHD_POLICY_WEBHOOK_ALLOW_HTTP", env("DSHD_POLICY_WEBHOOK_ALLOW_HTTP", "0")); err != nil {
		return Config{}, err
	}
	if c.PolicyWebhookPrivate, err = parseBool("DSHD_POLICY_WEBHOOK_ALLOW_PRIVATE", env("DSHD_POLICY_WEBHOOK_ALLOW_PRIVATE", "0")); err != nil {
		return Config{}, err
	}
	if c.WriteTimeout, err = parseDuration("DSHD_WRITE_TIMEOUT", env("DSHD_WRITE_TIMEOUT", "30s")); err != nil {
		return Config{}, err
	}
	if c.PageBytes, err = strconv.Atoi(env("DSHD_PAGE_BYTES", "4194304")); err != nil || c.PageBytes < 1 {
		return Config{}, fmt.Errorf("DSHD_PAGE_BYTES must be a positive integer")
	}
	if c.ReadHeaderTimeout, err = parseDuration("DSHD_READ_HEADER_TIMEOUT", env("DSHD_READ_HEADER_TIMEOUT", "5s")); err != nil {
		return Config{}, err
	}
	if c.BodyReadTimeout, err = parseDuration("DSHD_BODY_READ_TIMEOUT", env("DSHD_BODY_READ_TIMEOUT", "10s")); err != nil {
		return Config{}, err
	}
	if c.MaxUnauthenticated, err = strconv.Atoi(env("DSHD_MAX_UNAUTHENTICATED", "256")); err != nil || c.MaxUnauthenticated < 1 {
		return Config{}, fmt.Errorf("DSHD_MAX_UNAUTHENTICATED must be a positive integer")
	}
	if c.StreamWriteTimeout, err = parseDuration("DSHD_SSE_WRITE_TIMEOUT", env("DSHD_SSE_WRITE_TIMEOUT", "10s")); err != nil {
		return Config{}, err
	}
	for _, n := range []struct {
		name, def string
		to        *int
	}{
		{"DSHD_SSE_MAX_LAG", "4194304", &c.StreamMaxLag},
		{"DSHD_SSE_MAX_PER_SESSION", "32", &c.MaxStreamsPerSession},
		{"DSHD_SSE_MAX_PER_TENANT", "256", &c.MaxStreamsPerTenant},
	} {
		if *n.to, err = strconv.Atoi(env(n.name, n.def)); err != nil || *n.to < 1 {
			return Config{}, fmt.Errorf("%s must be a positive integer", n.name)
		}
	}
	if err := c.parseCredentials(getenv, env); err != nil {
		return Config{}, err
	}
	if err := c.parseTenantLimits(env); err != nil {
		return Config{}, err
	}
	if err := c.LogLevel.UnmarshalText([]byte(env("DSHD_LOG_LEVEL", "info"))); err != nil {
		return Config{}, fmt.Errorf("DSHD_LOG_LEVEL: %w", err)
	}
	if !strings.EqualFold(env("OTEL_SDK_DISABLED", "false"), "true") {
		c.TracesURL = telemetry.TracesURL(env("DSHD_OTLP_ENDPOINT", ""), env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ""),
			env("OTEL_EXPORTER_OTLP_ENDPOINT", ""))
	}
	if u, err := url.Parse(c.TracesURL); c.TracesURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		return Config{}, fmt.Errorf("the OTLP endpoint (DSHD_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_*ENDPOINT) must be an http or https URL")
	}
	c.MetricsModels = splitList(getenv("DSHD_METRICS_MODELS"))
	if err := c.Webhooks.parse(env); err != nil {
		return Config{}, err
	}
	if err := c.CPU.parse(env); err != nil {
		return Config{}, err
	}
	c.MetricsToken = getenv("DSHD_METRICS_TOKEN")
	return c, nil
}

// parseCredentials reads the settings of tenant credentials. Errors name a key by its id only.
func (c *Config) parseCredentials(getenv func(string) string, env func(name, def string) string) error {
	var err error
	if c.CredentialKeys, err = secretbox.ParseKeyring(getenv("DSHD_CREDENTIAL_KEYS")); err != nil {
		return fmt.Errorf("DSHD_CREDENTIAL_KEYS: %w", err)
	}
	c.OperatorKeyFallback, err = parseBool("DSHD_OPERATOR_KEY_FALLBACK", env("DSHD_OPERATOR_KEY_FALLBACK", "1"))
	return err
}

// parse reads the webhook settings.
func (w *WebhookSettings) parse(env func(name, def string) string) error {
	var err error
	if w.AllowHTTP, err = parseBool("DSHD_WEBHOOK_ALLOW_HTTP", env("DSHD_WEBHOOK_ALLOW_HTTP", "0")); err != nil {
		return err
	}
	if w.AllowPrivate, err = parseBool("DSHD_WEBHOOK_ALLOW_PRIVATE", env("DSHD_WEBHOOK_ALLOW_PRIVATE", "0")); err != nil {
		return err
	}
	for _, n := range []struct {
		name, def string
		to        *int
	}{
		{"DSHD_WEBHOOK_MAX_ENDPOINTS", "20", &w.MaxEndpoints},
		{"DSHD_WEBHOOK_WORKERS", "16", &w.Workers},
		{"DSHD_WEBHOOK_MAX_ATTEMPTS", "12", &w.MaxAttempts},
	} {
		if *n.to, err = strconv.Atoi(env(n.name, n.def)); err != nil || *n.to < 1 {
			return fmt.Errorf("%s must be a positive integer", n.name)
		}
	}
	for _, d := range []struct {
		name, def string
		to        *time.Duration
	}{
		{"DSHD_WEBHOOK_TIMEOUT", "10s", &w.Timeout},
		{"DSHD_WEBHOOK_POLL", "250ms", &w.Poll},
		{"DSHD_WEBHOOK_RETRY_BASE", "5s", &w.RetryBase},
		{"DSHD_WEBHOOK_RETRY_MAX", "1h", &w.RetryMax},
		{"DSHD_WEBHOOK_RETENTION", "168h", &w.Retention},
	} {
		if *d.to, err = parseDuration(d.name, env(d.name, d.def)); err != nil {
			return err
		}
	}
	if w.RetryMax < w.RetryBase {
		return fmt.Errorf("DSHD_WEBHOOK_RETRY_MAX must be at least DSHD_WEBHOOK_RETRY_BASE")
	}
	return nil
}

// parseTools reads the workspace tools' settings.
func (c *Config) parseTools(env func(name, def string) string) error {
	c.WorkspaceRoot = env("DSHD_WORKSPACE_ROOT", "")
	var err error
	if c.WorkspaceQuota, err = strconv.ParseInt(env("DSHD_WORKSPACE_QUOTA", "1073741824"), 10, 64); err != nil || c.WorkspaceQuota < 1 {
		return fmt.Errorf("DSHD_WORKSPACE_QUOTA must be a positive number of bytes")
	}
	switch c.Shell = env("DSHD_SHELL", "bwrap"); c.Shell {
	case "bwrap", "local", "off":
	default:
		return fmt.Errorf("DSHD_SHELL must be bwrap, local or off (got %q)", c.Shell)
	}
	uid, gid, ok := strings.Cut(env("DSHD_SANDBOX_USER", "65534:65534"), ":")
	if c.SandboxUser[0], err = strconv.Atoi(uid); err != nil || !ok || c.SandboxUser[0] < 1 {
		return fmt.Errorf("DSHD_SANDBOX_USER must be uid:gid, not root")
	}
	if c.SandboxUser[1], err = strconv.Atoi(gid); err != nil || c.SandboxUser[1] < 1 {
		return fmt.Errorf("DSHD_SANDBOX_USER must be uid:gid, not root")
	}
	c.WebAllowPrivate, err = parseBool("DSHD_WEB_ALLOW_PRIVATE", env("DSHD_WEB_ALLOW_PRIVATE", "0"))
	return err
}

// parsePrevious reads the former values of a rotation (DSHD_ADMIN_TOKEN_PREVIOUS,
// DSHD_STREAM_TOKEN_SECRET_PREVIOUS). Each needs its current value set: a server accepting only
// an old token or secret would be a rotation left half done. Errors name entries by position only.
func (c *Config) parsePrevious(getenv func(string) string) error {
	c.AdminTokenPrevious = splitList(getenv("DSHD_ADMIN_TOKEN_PREVIOUS"))
	if len(c.AdminTokenPrevious) > 0 && c.AdminToken == "" {
		return fmt.Errorf("DSHD_ADMIN_TOKEN_PREVIOUS needs DSHD_ADMIN_TOKEN (the current token)")
	}
	// A former admin token is kept only while clients move off it, so it is held to the length of
	// a real secret (the current token is not: `make run`'s dev-admin-token is shorter).
	for i, s := range c.AdminTokenPrevious {
		if len(s) < minPreviousBytes {
			return fmt.Errorf("DSHD_ADMIN_TOKEN_PREVIOUS: entry %d must be at least %d bytes (replace a shorter token without an overlap)", i+1, minPreviousBytes)
		}
	}
	c.StreamTokenSecretPrevious = splitList(getenv("DSHD_STREAM_TOKEN_SECRET_PREVIOUS"))
	if len(c.StreamTokenSecretPrevious) > 0 && c.StreamTokenSecret == "" {
		return fmt.Errorf("DSHD_STREAM_TOKEN_SECRET_PREVIOUS needs DSHD_STREAM_TOKEN_SECRET (the current secret)")
	}
	for i, s := range c.StreamTokenSecretPrevious {
		if len(s) < minPreviousBytes {
			return fmt.Errorf("DSHD_STREAM_TOKEN_SECRET_PREVIOUS: entry %d must be at least %d bytes", i+1, minPreviousBytes)
		}
	}
	return nil
}

// minPreviousBytes is the least length of a former admin token or stream-token secret.
const minPreviousBytes = 32

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func parseBool(name, v string) (bool, error) {
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("%s must be 1 or 0 (got %q)", name, v)
}

// parseRate reads a rate in events a second; 0 means no limit.
func parseRate(name, v string) (float64, error) {
	r, err := strconv.ParseFloat(v, 64)
	if err != nil || r < 0 || math.IsInf(r, 0) || math.IsNaN(r) {
		return 0, fmt.Errorf("%s must be a non-negative number of posts a second, 0 for no limit (got %q)", name, v)
	}
	return r, nil
}

// postRate is the worker's rate of a setting read by parseRate (0: no limit).
func postRate(perSecond float64, burst int) worker.Rate {
	if perSecond == 0 {
		return worker.Rate{PerSecond: -1}
	}
	return worker.Rate{PerSecond: perSecond, Burst: burst}
}

func parseDuration(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s must be a positive Go duration such as 15s (got %q)", name, v)
	}
	return d, nil
}

// parseTenantLimits reads the server's default tenant limits (0 or unset: no limit).
func (c *Config) parseTenantLimits(env func(name, def string) string) error {
	rps, err := strconv.ParseFloat(env("DSHD_TENANT_RPS", "0"), 64)
	if err != nil || rps < 0 || (rps > 0 && rps < tenant.MinRequestsPerSecond) || rps > tenant.MaxRequestsPerSecond || math.IsNaN(rps) {
		return fmt.Errorf("DSHD_TENANT_RPS must be 0 (no limit) or a number of requests a second from %v to %d",
			tenant.MinRequestsPerSecond, tenant.MaxRequestsPerSecond)
	}
	burst, err := strconv.Atoi(env("DSHD_TENANT_BURST", "0"))
	if err != nil || burst < 0 || burst > tenant.MaxBurst {
		return fmt.Errorf("DSHD_TENANT_BURST must be an integer from 0 (the rate rounded up) to %d", tenant.MaxBurst)
	}
	var l tenant.Limits
	if rps > 0 {
		l.RequestsPerSecond = &rps
		if burst > 0 {
			l.Burst = &burst
		}
	}
	for _, q := range []struct {
		name string
		to   **int64
	}{
		{"DSHD_TENANT_TOKENS_PER_DAY", &l.TokensPerDay},
		{"DSHD_TENANT_MAX_SESSIONS", &l.MaxSessions},
		{"DSHD_TENANT_MAX_LOG_BYTES", &l.MaxLogBytes},
	} {
		n, err := strconv.ParseInt(env(q.name, "0"), 10, 64)
		if err != nil || n < 0 || n > tenant.MaxQuota {
			return fmt.Errorf("%s must be an integer from 0 (no limit) to %d", q.name, tenant.MaxQuota)
		}
		if n > 0 {
			*q.to = &n
		}
	}
	c.TenantLimits = l
	return nil
}

// parseSandbox reads the sandbox network switch and the tenant workspace bound.
func (c *Config) parseSandbox(env func(name, def string) string) error {
	var err error
	if c.SandboxNetwork, err = parseBool("DSHD_SANDBOX_NETWORK", env("DSHD_SANDBOX_NETWORK", "0")); err != nil {
		return err
	}
	if c.SandboxEgressDeny, err = parsePrefixes("DSHD_SANDBOX_EGRESS_DENY", env("DSHD_SANDBOX_EGRESS_DENY", "")); err != nil {
		return err
	}
	if c.TenantWorkspaceBytes, err = strconv.ParseInt(env("DSHD_TENANT_WORKSPACE_BYTES", "0"), 10, 64); err != nil || c.TenantWorkspaceBytes < 0 {
		return fmt.Errorf("DSHD_TENANT_WORKSPACE_BYTES must be a number of bytes (0: no bound)")
	}
	return nil
}

// parsePrefixes reads a comma-separated list of CIDR ranges or single addresses (a /32 or
// /128); empty items are ignored.
func parsePrefixes(name, v string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for item := range strings.SplitSeq(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		p, err := netip.ParsePrefix(item)
		if err != nil {
			a, aerr := netip.ParseAddr(item)
			if aerr != nil || a.Zone() != "" {
				return nil, fmt.Errorf("%s must be a comma-separated list of CIDR ranges or addresses (10.0.0.0/8, 203.0.113.7): %q is neither", name, item)
			}
			a = a.Unmap()
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// parseSandboxMemory reads the memory bound of a sandboxed command.
func (c *Config) parseSandboxMemory(env func(name, def string) string) error {
	n, err := strconv.ParseInt(env("DSHD_SANDBOX_MEMORY_BYTES", "1073741824"), 10, 64)
	switch {
	case err != nil || n < 0 || n > 0 && n < 16<<20:
		return fmt.Errorf("DSHD_SANDBOX_MEMORY_BYTES must be a number of bytes, at least 16777216 (0: no memory cgroup)")
	case n == 0:
		c.SandboxMemoryBytes = -1
	default:
		c.SandboxMemoryBytes = n
	}
	return nil
}
