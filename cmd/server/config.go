package main

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
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
	// ModelHosts (DSHD_MODEL_HOSTS, comma-separated) are the hosts a preset's model.baseUrl may
	// point at, a guard against server-side request forgery; "*" allows any. Default
	// "api.deepseek.com".
	ModelHosts []string
	// DemoTools (DSHD_DEMO_TOOLS=1) adds the harmless demo tool pack (echo, sleep) for tests,
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
	// SIGINT or SIGTERM. Default 10s.
	ShutdownTimeout time.Duration
	// LogLevel (DSHD_LOG_LEVEL: debug, info, warn, error) of the JSON logs. Default info.
	LogLevel slog.Level
	// LeaseTTL (DSHD_LEASE_TTL, a Go duration) is how long a session's run lease lasts without
	// renewal: after a replica dies, another takes over its sessions within about this long.
	// Default 10s.
	LeaseTTL time.Duration
	// MaxTurns (DSHD_MAX_TURNS) is how many turns this replica runs at once. Default 100.
	MaxTurns int
	// TenantMaxTurns (DSHD_TENANT_MAX_TURNS) is how many turns one tenant runs at once on all
	// replicas together, so that no tenant starves the others. Default 20.
	TenantMaxTurns int
	// ScriptedModel (DSHD_SCRIPTED_MODEL) offers the scripted test model to presets. Default on
	// (the offline first run uses it); a hosted deployment may turn it off.
	ScriptedModel bool
	// ToolTimeout (DSHD_TOOL_TIMEOUT, a Go duration) bounds every tool that sets no timeout of its
	// own (SPEC extension E2). Default 10m.
	ToolTimeout time.Duration
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
	if c.DemoTools, err = parseBool("DSHD_DEMO_TOOLS", env("DSHD_DEMO_TOOLS", "0")); err != nil {
		return Config{}, err
	}
	if c.Heartbeat, err = parseDuration("DSHD_SSE_HEARTBEAT", env("DSHD_SSE_HEARTBEAT", "15s")); err != nil {
		return Config{}, err
	}
	if c.ShutdownTimeout, err = parseDuration("DSHD_SHUTDOWN_TIMEOUT", env("DSHD_SHUTDOWN_TIMEOUT", "10s")); err != nil {
		return Config{}, err
	}
	if c.MaxBodyBytes, err = strconv.ParseInt(env("DSHD_MAX_BODY_BYTES", "1048576"), 10, 64); err != nil || c.MaxBodyBytes < 1 {
		return Config{}, fmt.Errorf("DSHD_MAX_BODY_BYTES must be a positive integer")
	}
	if c.LeaseTTL, err = parseDuration("DSHD_LEASE_TTL", env("DSHD_LEASE_TTL", "10s")); err != nil {
		return Config{}, err
	}
	if c.MaxTurns, err = strconv.Atoi(env("DSHD_MAX_TURNS", "100")); err != nil || c.MaxTurns < 1 {
		return Config{}, fmt.Errorf("DSHD_MAX_TURNS must be a positive integer")
	}
	if c.TenantMaxTurns, err = strconv.Atoi(env("DSHD_TENANT_MAX_TURNS", "20")); err != nil || c.TenantMaxTurns < 1 {
		return Config{}, fmt.Errorf("DSHD_TENANT_MAX_TURNS must be a positive integer")
	}
	if c.ScriptedModel, err = parseBool("DSHD_SCRIPTED_MODEL", env("DSHD_SCRIPTED_MODEL", "1")); err != nil {
		return Config{}, err
	}
	if c.ToolTimeout, err = parseDuration("DSHD_TOOL_TIMEOUT", env("DSHD_TOOL_TIMEOUT", "10m")); err != nil {
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
	if err := c.LogLevel.UnmarshalText([]byte(env("DSHD_LOG_LEVEL", "info"))); err != nil {
		return Config{}, fmt.Errorf("DSHD_LOG_LEVEL: %w", err)
	}
	return c, nil
}

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

func parseDuration(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s must be a positive Go duration such as 15s (got %q)", name, v)
	}
	return d, nil
}
