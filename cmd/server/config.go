package main

//go:generate go test -run ^TestREADMESettingsTable$ -update-readme .

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/internal/envconf"
	"github.com/dshd/dshd/pkg/secretbox"
	"github.com/dshd/dshd/pkg/telemetry"
	"github.com/dshd/dshd/pkg/tenant"
	"github.com/dshd/dshd/pkg/worker"
)

// Config is the server's configuration, read from the environment by envconf: each setting's
// field carries its variable, default and documentation in its tags (internal/envconf), and the
// README's settings table is generated from them (`go generate ./cmd/server`). Fields without an
// env tag are derived from the settings by ParseConfig. Every setting has a default; a secret is
// never printed (String).
type Config struct {
	DatabaseURL        string   `env:"DATABASE_URL,secret" defaultdoc:"«postgres://postgres@127.0.0.1:55432/dshd?sslmode=disable» (the «make run» cluster)" doc:"PostgreSQL; pgx pool settings such as «pool_max_conns=20» may be appended"`
	Addr               string   `env:"DSHD_ADDR" default:":8080" doc:"listen address"`
	AdminToken         string   `env:"DSHD_ADMIN_TOKEN,secret,raw" defaultdoc:"empty: tenant administration disabled" doc:"bearer token for «POST /v1/tenants»"`
	AdminTokenPrevious []string `env:"DSHD_ADMIN_TOKEN_PREVIOUS,secret" doc:"former admin tokens (comma-separated, each at least 32 bytes) still accepted during a rotation ([docs/credentials-and-keys.md](docs/credentials-and-keys.md))"`
	ModelHosts         []string `env:"DSHD_MODEL_HOSTS" default:"api.deepseek.com" doc:"comma-separated hosts («host» or «host:port») a preset's «model.baseUrl» may point at (SSRF guard); a host without a port allows only the scheme's default port («localhost» does not allow «localhost:8080»); «*» allows any"`
	DemoTools          bool     `env:"DSHD_DEMO_TOOLS" default:"0" doc:"«1» adds the harmless demo tools: «echo» (parallel), «sleep» (exclusive), «wait» («sleep» in parallel) and «fail» (fails with its text, no code)"`
	DeepSeekAPIKey     string   `env:"DEEPSEEK_API_KEY,secret,raw" doc:"DeepSeek key; without it «make run»'s default preset uses the scripted model. Sent only to «https://api.deepseek.com» (a preset without «baseUrl», or with that host on port 443); presets pointing elsewhere get no key"`

	Heartbeat            time.Duration `env:"DSHD_SSE_HEARTBEAT" default:"15s" doc:"SSE comment heartbeat interval (also a re-read of the log)"`
	StreamWriteTimeout   time.Duration `env:"DSHD_SSE_WRITE_TIMEOUT" default:"10s" doc:"bound on each write of an SSE stream (at most 64 KiB of frames); a client that does not take it in time is disconnected and resumes with «Last-Event-ID»"`
	StreamMaxLag         int           `env:"DSHD_SSE_MAX_LAG" default:"4194304" min:"1" doc:"bytes of frames a caught-up SSE stream may fall behind its session's log before it is dropped (it resumes with «Last-Event-ID»)"`
	MaxStreamsPerSession int           `env:"DSHD_SSE_MAX_PER_SESSION" default:"32" min:"1" doc:"SSE streams open on a replica for one session (event streams and message streams together); beyond it they answer 429 «too_many_streams»"`
	MaxStreamsPerTenant  int           `env:"DSHD_SSE_MAX_PER_TENANT" default:"256" min:"1" doc:"SSE streams open on a replica for one tenant; beyond it they answer 429 «too_many_streams»"`
	MaxBodyBytes         int64         `env:"DSHD_MAX_BODY_BYTES" default:"1048576" min:"1" doc:"request body limit (larger bodies answer 413)"`
	ImportMaxBytes       int64         `env:"DSHD_IMPORT_MAX_BYTES" default:"33554432" min:"1" doc:"body limit of «POST /v1/sessions/import», a session log in DSH's JSONL (larger bodies answer 413)"`
	WriteTimeout         time.Duration `env:"DSHD_WRITE_TIMEOUT" default:"30s" doc:"bound on writing any response but an SSE stream: a client that does not read is disconnected"`
	ReadHeaderTimeout    time.Duration `env:"DSHD_READ_HEADER_TIMEOUT" default:"5s" doc:"bound on reading a request's head; a connection that trickles it is closed"`
	BodyReadTimeout      time.Duration `env:"DSHD_BODY_READ_TIMEOUT" default:"10s" doc:"bound on reading a request body, from the start of the request; a late body answers 408 «request_timeout»"`
	MaxUnauthenticated   int           `env:"DSHD_MAX_UNAUTHENTICATED" default:"256" min:"1" doc:"requests in flight that have not authenticated yet (any request until its key is checked); beyond it requests answer 503 «server_busy» («GET /healthz» is never refused)"`
	PageBytes            int           `env:"DSHD_PAGE_BYTES" default:"4194304" min:"1" doc:"event data in one page of «GET .../events» or «GET .../history» (a page holds at least one event or message)"`
	ShutdownTimeout      time.Duration `env:"DSHD_SHUTDOWN_TIMEOUT" default:"10s" doc:"graceful shutdown bound on SIGINT/SIGTERM: the process exits within it. SSE streams end at its start with a «retry:» hint; running turns drain (below); what still runs a second before the bound is aborted («disposed»)"`
	DrainFinish          time.Duration `env:"DSHD_DRAIN_FINISH" default:"5s" doc:"how long a stopping replica lets its running turns go on toward their end (opening no further turn) before each hands over at its next step boundary («turn/parked» reason «handover») to another replica, which resumes it (docs/rules.md, E6); at most «DSHD_SHUTDOWN_TIMEOUT»"`
	LogLevel             slog.Level    `env:"DSHD_LOG_LEVEL" default:"info" doc:"«debug», «info», «warn», «error»; logs are JSON lines with request id, tenant and session"`
	LeaseTTL             time.Duration `env:"DSHD_LEASE_TTL" default:"10s" doc:"how long a session's run lease lasts without renewal: a crashed replica's turn is repaired by another within about this long"`
	DBRetry              time.Duration `env:"DSHD_DB_RETRY" default:"30s" doc:"how long a running turn's write to the log retries while PostgreSQL is unavailable (connections refused or lost, a restart or failover), with backoff, before the turn fails; a shorter outage only pauses running turns, and a write whose reply was lost is read back, never written twice. Requests meanwhile answer 503 «unavailable» with «Retry-After»"`

	MaxTurns         int     `env:"DSHD_MAX_TURNS" default:"100" min:"1" doc:"turns this replica runs at once"`
	TenantMaxTurns   int     `env:"DSHD_TENANT_MAX_TURNS" default:"20" min:"1" doc:"turns one tenant runs at once, on all replicas together (so no tenant starves the others); a hard bound: the check and the lease take are one atomic step (a tenant turn slot)"`
	InboxMaxMessages int     `env:"DSHD_INBOX_MAX_MESSAGES" default:"100" min:"1" doc:"messages that may wait in one session's inbox (followups, steers and injected messages together); a post beyond it answers 429 «inbox_full», except a waking post to an idle session (it serves the inbox)"`
	InboxMaxBytes    int64   `env:"DSHD_INBOX_MAX_BYTES" default:"8388608" min:"1" defaultdoc:"«8388608» (8 MiB)" doc:"bytes (of the messages' JSON) that may wait in one session's inbox, likewise"`
	SessionPostRate  float64 `env:"DSHD_SESSION_POST_RATE" default:"10" min:"0" unit:"posts a second" zero:"no limit" doc:"messages a second that may be posted to one session, on each replica (a token bucket; beyond it a post answers 429 «rate_limited» with «Retry-After»); «0»: no limit"`
	SessionPostBurst int     `env:"DSHD_SESSION_POST_BURST" default:"20" min:"1" doc:"the session bucket's size: posts accepted at once after a quiet while"`
	TenantPostRate   float64 `env:"DSHD_TENANT_POST_RATE" default:"200" min:"0" unit:"posts a second" zero:"no limit" doc:"messages a second one tenant may post to all its sessions together, on each replica; «0»: no limit"`
	TenantPostBurst  int     `env:"DSHD_TENANT_POST_BURST" default:"400" min:"1" doc:"the tenant bucket's size"`
	ScriptedModel    bool    `env:"DSHD_SCRIPTED_MODEL" default:"1" doc:"offer the scripted test model to presets; a hosted deployment may set «0» (scripted presets are then refused with 400, and stored ones end their turns with «NO_ADAPTER»)"`

	ToolTimeout     time.Duration `env:"DSHD_TOOL_TIMEOUT" default:"10m" doc:"bound of every tool that sets no timeout of its own"`
	WorkspaceRoot   string        `env:"DSHD_WORKSPACE_ROOT" defaultdoc:"empty: no workspace tools" doc:"directory of the sessions' workspaces («<root>/<session id>»); setting it adds «bash», «read», «write», «edit», «glob», «grep» and «web_fetch» (see [Tools and the sandbox](#tools-and-the-sandbox)); replicas must share it"`
	Shell           string        `env:"DSHD_SHELL" default:"bwrap" oneof:"bwrap,local,off" doc:"«bash»'s provider: «bwrap» (bubblewrap sandbox; the server does not start when it cannot run), «local» (on the host, no isolation: single-user development only) or «off» (no «bash»)"`
	WorkspaceQuota  int64         `env:"DSHD_WORKSPACE_QUOTA" default:"1073741824" min:"1" unit:"bytes" defaultdoc:"«1073741824» (1 GiB)" doc:"bytes of one workspace; a «write» or «edit» that would exceed it fails with «FS_TOO_LARGE»"`
	SandboxUser     [2]int        `env:"DSHD_SANDBOX_USER" default:"65534:65534" doc:"«uid:gid» the bwrap sandboxes run as when the server runs as root (not root: root ignores the process limit)"`
	WebAllowPrivate bool          `env:"DSHD_WEB_ALLOW_PRIVATE" default:"0" doc:"«1» lets «web_fetch» reach loopback, private and link-local addresses"`
	// SandboxMemoryBytes is sandbox.DefaultMemoryBytes by default; negative (the setting 0): no
	// memory cgroup.
	SandboxMemoryBytes   int64          `env:"DSHD_SANDBOX_MEMORY_BYTES" default:"1073741824" min:"0" unit:"bytes" zero:"no memory cgroup" defaultdoc:"«1073741824» (1 GiB)" doc:"the memory of each bwrap command as a whole (its processes, «/tmp» and «/dev/shm»), bounded by a memory cgroup of its own where the host gives the server a writable one (the server logs at startup whether it does); at least 16 MiB; «0»: no memory cgroup (see [docs/sandbox.md](docs/sandbox.md#memory))"`
	SandboxNetwork       bool           `env:"DSHD_SANDBOX_NETWORK" default:"0" doc:"«1» lets a preset give «bash»'s sandbox the egress network («tools.bash.network: true»): public addresses only, never the host, its gateways, loopback, private or metadata ranges (pasta and nftables, [docs/sandbox.md](docs/sandbox.md)); with «0» such a preset is refused with 400 «invalid_request» («tools.bash.network: ...»), and one stored before runs without the network"`
	SandboxEgressDeny    []netip.Prefix `env:"DSHD_SANDBOX_EGRESS_DENY" doc:"comma-separated CIDR ranges or addresses the egress network refuses besides the non-public ranges and the server's own addresses (e.g. «203.0.113.0/24,198.51.100.7»); in a container or on Kubernetes list the node's public addresses (the kubelet listens on «:10250») and the operator's other public services, which \"the host\" (the container's own network namespace) does not include; DNS always goes to the host's first resolver ([docs/sandbox.md](docs/sandbox.md))"`
	TenantWorkspaceBytes int64          `env:"DSHD_TENANT_WORKSPACE_BYTES" default:"0" min:"0" unit:"bytes" zero:"no bound" defaultdoc:"«0»: no bound" doc:"bytes all the workspaces of one tenant may hold together; a «write» or «edit» that would go over it fails with «FS_QUOTA_EXCEEDED», a «bash» command that goes over it is stopped and says so in its result (see [docs/sandbox.md](docs/sandbox.md))"`

	PolicyWebhookKey     string `env:"DSHD_POLICY_WEBHOOK_KEY,secret" minlen:"32" defaultdoc:"empty: policy webhooks disabled" doc:"at least 32 bytes; each preset's webhook signing secret is derived from it (see Tool policies)"`
	PolicyWebhookHTTP    bool   `env:"DSHD_POLICY_WEBHOOK_ALLOW_HTTP" default:"0" doc:"«1» allows «http://» policy webhooks (tests)"`
	PolicyWebhookPrivate bool   `env:"DSHD_POLICY_WEBHOOK_ALLOW_PRIVATE" default:"0" doc:"«1» allows policy webhooks on loopback, private and link-local addresses (tests, private networks)"`

	CORSOrigins               []string      `env:"DSHD_CORS_ORIGINS" defaultdoc:"empty: no other origin" doc:"comma-separated origins («scheme://host[:port]») whose pages may call the API from a browser (\"From a browser\")"`
	StreamTokenSecret         string        `env:"DSHD_STREAM_TOKEN_SECRET,secret,raw" minlen:"32" defaultdoc:"empty: a random secret per process" doc:"signs stream and action tokens, at least 32 bytes; give every replica the same one, or they refuse each other's tokens"`
	StreamTokenSecretPrevious []string      `env:"DSHD_STREAM_TOKEN_SECRET_PREVIOUS,secret" doc:"former stream-token secrets (comma-separated, at least 32 bytes each) whose tokens are still accepted during a rotation; new tokens are signed with «DSHD_STREAM_TOKEN_SECRET» only"`
	StreamTokenTTL            time.Duration `env:"DSHD_STREAM_TOKEN_TTL" default:"5m" max:"1h" doc:"how long a stream token opens streams, and the longest an action token lives (at most «1h»)"`

	CredentialKeys      *secretbox.Keyring `env:"DSHD_CREDENTIAL_KEYS,secret" defaultdoc:"empty: tenant credentials disabled" doc:"the operator's key encryption keys of tenant model credentials, «id:base64key,...» (32-byte keys, the active one first); rotation in [docs/credentials-and-keys.md](docs/credentials-and-keys.md)"`
	OperatorKeyFallback bool               `env:"DSHD_OPERATOR_KEY_FALLBACK" default:"1" doc:"«0» stops lending «DEEPSEEK_API_KEY» to presets without a «model.credential»: their DeepSeek turns end with «INVALID_CREDENTIAL»"`

	// Tracing gives TracesURL.
	Tracing TracingSettings
	// TracesURL is where turn traces are exported over OTLP/HTTP (docs/observability.md), from
	// Tracing. Empty: no tracing.
	TracesURL     string
	MetricsModels []string `env:"DSHD_METRICS_MODELS" defaultdoc:"empty: DeepSeek's models only" doc:"comma-separated model names that get their own «gen_ai_request_model» label value on «/metrics» besides «deepseek-chat» and «deepseek-reasoner»; any other is «other»"`

	// Webhooks are the settings of tenant webhooks (docs/webhooks.md).
	Webhooks WebhookSettings

	// TenantDefaults give TenantLimits.
	TenantDefaults TenantLimitSettings
	// TenantLimits are the server's default tenant limits (docs/usage-and-quotas.md), for every
	// tenant whose own limits (PUT /v1/tenants/{id}/limits) leave a field null, from
	// TenantDefaults. maxConcurrentTurns' default is DSHD_TENANT_MAX_TURNS (TenantMaxTurns,
	// filled in by Run).
	TenantLimits tenant.Limits

	MetricsToken string `env:"DSHD_METRICS_TOKEN,secret,raw" defaultdoc:"empty: «/metrics» is open (keep it off the public network)" doc:"the bearer token «GET /metrics» then requires (401 without it)"`
	CPUProfile   string `env:"DSHD_CPU_PROFILE" defaultdoc:"empty: no profile" doc:"a file that «dshd serve» writes a Go CPU profile to, from start until shutdown, for «go tool pprof» («cmd/loadgen» passes it through)"`

	// CPU bounds the concurrent run_code programs and bash commands (cpu_config.go).
	CPU CPUSettings
}

// TracingSettings say where turn traces are exported: DSHD_OTLP_ENDPOINT plus /v1/traces, else
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else OTEL_EXPORTER_OTLP_ENDPOINT plus /v1/traces;
// none when OTEL_SDK_DISABLED is true.
type TracingSettings struct {
	OTLPEndpoint   string `env:"DSHD_OTLP_ENDPOINT,secret" defaultdoc:"empty: no tracing" doc:"base URL of an OTLP/HTTP receiver («http://collector:4318»): every turn is traced («turn > step > model call / tool call») and exported to «<base>/v1/traces»; the standard «OTEL_EXPORTER_OTLP_TRACES_ENDPOINT» / «OTEL_EXPORTER_OTLP_ENDPOINT» work too (see [docs/observability.md](docs/observability.md))"`
	TracesEndpoint string `env:"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,secret" doc:"the standard OTLP traces URL, used as it is when «DSHD_OTLP_ENDPOINT» is unset"`
	Endpoint       string `env:"OTEL_EXPORTER_OTLP_ENDPOINT,secret" doc:"the standard OTLP base URL («/v1/traces» is appended), used when both above are unset"`
	SDKDisabled    string `env:"OTEL_SDK_DISABLED" default:"false" doc:"«true» turns tracing off; any other value leaves it on"`
	TrustIngress   bool   `env:"DSHD_TRACE_TRUST_INGRESS" default:"0" doc:"«1» makes a request's W3C «traceparent» the parent of its server span (the caller's trace continues into dshd's, with the caller's sampling decision): only behind a proxy that sets or strips it; «0»: the request starts a trace of its own, linked to the caller's span"`
}

// TenantLimitSettings are the DSHD_TENANT_* defaults of tenant limits; 0 is no limit.
type TenantLimitSettings struct {
	RequestsPerSecond float64 `env:"DSHD_TENANT_RPS" default:"0" defaultdoc:"«0»: no limit" doc:"default requests a second of a tenant on the HTTP API, all replicas together (429 «rate_limited» with «Retry-After» and «RateLimit-*» headers beyond it); a tenant's own limit («PUT /v1/tenants/{id}/limits») replaces it, see [docs/usage-and-quotas.md](docs/usage-and-quotas.md)"`
	Burst             int     `env:"DSHD_TENANT_BURST" default:"0" defaultdoc:"«0»: the rate rounded up" doc:"default burst of that rate"`
	TokensPerDay      int64   `env:"DSHD_TENANT_TOKENS_PER_DAY" default:"0" defaultdoc:"«0»: no limit" doc:"default input + output tokens of a tenant's turns per UTC day; a turn past it ends with «TOKEN_QUOTA_EXCEEDED», a post answers 429 «quota_exceeded»"`
	MaxSessions       int64   `env:"DSHD_TENANT_MAX_SESSIONS" default:"0" defaultdoc:"«0»: no limit" doc:"default live sessions of a tenant (429 «quota_exceeded» beyond)"`
	MaxLogBytes       int64   `env:"DSHD_TENANT_MAX_LOG_BYTES" default:"0" defaultdoc:"«0»: no limit" doc:"default stored log bytes of a tenant's live sessions (429 «quota_exceeded» for posts and creates beyond)"`
}

// WebhookSettings configure tenant webhooks: which endpoints may be registered and how their
// deliveries are attempted (docs/webhooks.md). The wait after failed attempt n is
// RetryBase·2^(n-1), at most RetryMax, jittered into its upper half; after MaxAttempts attempts
// the delivery has failed.
type WebhookSettings struct {
	AllowHTTP    bool          `env:"DSHD_WEBHOOK_ALLOW_HTTP" default:"0" doc:"«1» allows «http://» tenant webhook endpoints (tests); see [docs/webhooks.md](docs/webhooks.md)"`
	AllowPrivate bool          `env:"DSHD_WEBHOOK_ALLOW_PRIVATE" default:"0" doc:"«1» allows tenant webhook endpoints on loopback, private and link-local addresses (tests, private networks)"`
	MaxEndpoints int           `env:"DSHD_WEBHOOK_MAX_ENDPOINTS" default:"20" min:"1" doc:"webhook endpoints per tenant; beyond it a creation answers 409 «too_many_webhooks»"`
	Timeout      time.Duration `env:"DSHD_WEBHOOK_TIMEOUT" default:"10s" doc:"bound of one delivery attempt"`
	Workers      int           `env:"DSHD_WEBHOOK_WORKERS" default:"16" min:"1" doc:"delivery attempts one replica makes at once"`
	Poll         time.Duration `env:"DSHD_WEBHOOK_POLL" default:"250ms" doc:"how often a replica looks for due deliveries"`
	RetryBase    time.Duration `env:"DSHD_WEBHOOK_RETRY_BASE" default:"5s" doc:"the retry schedule's base: the wait after failed attempt n is base·2^(n-1), at most «DSHD_WEBHOOK_RETRY_MAX», jittered"`
	RetryMax     time.Duration `env:"DSHD_WEBHOOK_RETRY_MAX" default:"1h" doc:"the longest wait between attempts; at least «DSHD_WEBHOOK_RETRY_BASE»"`
	MaxAttempts  int           `env:"DSHD_WEBHOOK_MAX_ATTEMPTS" default:"12" min:"1" doc:"attempts of a delivery; after the last it has failed"`
	Retention    time.Duration `env:"DSHD_WEBHOOK_RETENTION" default:"168h" doc:"how long delivered and failed deliveries stay in the delivery log"`
}

// DefaultDatabaseURL is the database of the `make run` development cluster (cmd/server devdb).
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:55432/dshd?sslmode=disable"

// String lists the settings, secrets shown only as set: a Config may be printed or logged.
func (c Config) String() string { return envconf.Format(c) }

// GoString is String, for %#v.
func (c Config) GoString() string { return c.String() }

// LogValue is String, for log/slog.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.String()) }

// ParseConfig reads the configuration from getenv (os.Getenv in main, a map in tests).
func ParseConfig(getenv func(string) string) (Config, error) {
	c := Config{DatabaseURL: DefaultDatabaseURL, CPU: defaultCPUSettings()}
	if err := envconf.Load(getenv, &c, decoders()...); err != nil {
		return Config{}, err
	}
	var err error
	if c.CORSOrigins, err = api.ParseOrigins(c.CORSOrigins); err != nil {
		return Config{}, fmt.Errorf("DSHD_CORS_ORIGINS: %w", err)
	}
	if err := c.checkPrevious(); err != nil {
		return Config{}, err
	}
	if c.DrainFinish > c.ShutdownTimeout {
		return Config{}, errors.New("DSHD_DRAIN_FINISH must be a positive Go duration of at most DSHD_SHUTDOWN_TIMEOUT")
	}
	if err := c.checkSandboxMemory(); err != nil {
		return Config{}, err
	}
	if c.TenantLimits, err = c.TenantDefaults.limits(); err != nil {
		return Config{}, err
	}
	if c.TracesURL, err = c.Tracing.tracesURL(); err != nil {
		return Config{}, err
	}
	if c.Webhooks.RetryMax < c.Webhooks.RetryBase {
		return Config{}, errors.New("DSHD_WEBHOOK_RETRY_MAX must be at least DSHD_WEBHOOK_RETRY_BASE")
	}
	if err := c.CPU.check(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// decoders read the settings of types envconf does not know.
func decoders() []envconf.Decoder {
	return []envconf.Decoder{envconf.Decode(secretbox.ParseKeyring), envconf.Decode(parsePrefixes), envconf.Decode(parseUser)}
}

// tracesURL is where traces go, or empty for none.
func (t TracingSettings) tracesURL() (string, error) {
	if strings.EqualFold(t.SDKDisabled, "true") {
		return "", nil
	}
	traces := telemetry.TracesURL(t.OTLPEndpoint, t.TracesEndpoint, t.Endpoint)
	if u, err := url.Parse(traces); traces != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		return "", errors.New("the OTLP endpoint (DSHD_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_*ENDPOINT) must be an http or https URL")
	}
	return traces, nil
}

// parseUser reads DSHD_SANDBOX_USER, uid:gid, neither 0.
func parseUser(s string) ([2]int, error) {
	uid, gid, ok := strings.Cut(s, ":")
	u, uerr := strconv.Atoi(uid)
	g, gerr := strconv.Atoi(gid)
	if !ok || uerr != nil || gerr != nil || u < 1 || g < 1 {
		return [2]int{}, errors.New("must be uid:gid, not root")
	}
	return [2]int{u, g}, nil
}

// checkPrevious checks the former values of a rotation (DSHD_ADMIN_TOKEN_PREVIOUS,
// DSHD_STREAM_TOKEN_SECRET_PREVIOUS). Each needs its current value set: a server accepting only
// an old token or secret would be a rotation left half done. Errors name entries by position only.
func (c *Config) checkPrevious() error {
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

// postRate is the worker's rate of a posts-a-second setting (0: no limit).
func postRate(perSecond float64, burst int) worker.Rate {
	if perSecond == 0 {
		return worker.Rate{PerSecond: -1}
	}
	return worker.Rate{PerSecond: perSecond, Burst: burst}
}

// limits are the default tenant limits of the settings (0: no limit), each within what
// tenant.Limits accepts.
func (s TenantLimitSettings) limits() (tenant.Limits, error) {
	rps, burst := s.RequestsPerSecond, s.Burst
	if rps < 0 || (rps > 0 && rps < tenant.MinRequestsPerSecond) || rps > tenant.MaxRequestsPerSecond {
		return tenant.Limits{}, fmt.Errorf("DSHD_TENANT_RPS must be 0 (no limit) or a number of requests a second from %v to %d",
			tenant.MinRequestsPerSecond, tenant.MaxRequestsPerSecond)
	}
	if burst < 0 || burst > tenant.MaxBurst {
		return tenant.Limits{}, fmt.Errorf("DSHD_TENANT_BURST must be an integer from 0 (the rate rounded up) to %d", tenant.MaxBurst)
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
		n    int64
		to   **int64
	}{
		{"DSHD_TENANT_TOKENS_PER_DAY", s.TokensPerDay, &l.TokensPerDay},
		{"DSHD_TENANT_MAX_SESSIONS", s.MaxSessions, &l.MaxSessions},
		{"DSHD_TENANT_MAX_LOG_BYTES", s.MaxLogBytes, &l.MaxLogBytes},
	} {
		if q.n < 0 || q.n > tenant.MaxQuota {
			return tenant.Limits{}, fmt.Errorf("%s must be an integer from 0 (no limit) to %d", q.name, tenant.MaxQuota)
		}
		if q.n > 0 {
			n := q.n
			*q.to = &n
		}
	}
	return l, nil
}

// parsePrefixes reads a comma-separated list of CIDR ranges or single addresses (a /32 or
// /128); empty items are ignored.
func parsePrefixes(v string) ([]netip.Prefix, error) {
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
				return nil, fmt.Errorf("must be a comma-separated list of CIDR ranges or addresses (10.0.0.0/8, 203.0.113.7): %q is neither", item)
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

// checkSandboxMemory checks the memory bound of a sandboxed command; the setting 0 (no memory
// cgroup) becomes -1.
func (c *Config) checkSandboxMemory() error {
	switch n := c.SandboxMemoryBytes; {
	case n > 0 && n < 16<<20:
		return fmt.Errorf("DSHD_SANDBOX_MEMORY_BYTES must be a number of bytes, at least 16777216 (0: no memory cgroup)")
	case n == 0:
		c.SandboxMemoryBytes = -1
	}
	return nil
}
