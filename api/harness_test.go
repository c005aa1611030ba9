package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/internal/contracttest"
	"github.com/dshd/dshd/internal/pgtest"
	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/approval"
	"github.com/dshd/dshd/pkg/codemode"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const adminToken = "test-admin-token"

// replica is one API server over a database, as a replica in production: its own hub (LISTEN
// connection) and HTTP server.
type replica struct {
	api *api.Server
	url string
}

// env is a migrated database with two tenants and a first replica serving it.
type env struct {
	t       testing.TB
	pool    *pgxpool.Pool
	log     *pgstore.Store
	tenantA uuid.UUID
	tenantB uuid.UUID
	keyA    string
	keyB    string
	// mockHost, when set, is a model host presets may point at (a cmd/mockllm server).
	mockHost string
	// tools are registered beside the built-in tools on every replica.
	tools []*registry.Tool
	*replica
	// code, when set, mounts a code runtime (code mode's run_code) on the replicas started after
	// it is set.
	code bool
	// approvals, when set, makes the approval service of the replicas started after it is set
	// from the default configuration; nil from it: no approval service (asks are denied as
	// without one, APR-1).
	approvals func(approval.Config) *approval.Service
	// worker, when set, adjusts the worker configuration of the replicas started after it is set.
	worker func(*worker.Config)
	// loop, when set, adjusts the agent loop configuration of the replicas started after it is set.
	loop func(*agentloop.Config)
}

func (e *env) modelHosts() []string {
	hosts := []string{"api.deepseek.com"}
	if e.mockHost != "" {
		hosts = append(hosts, e.mockHost)
	}
	return hosts
}

// newEnv starts a fresh database, two tenants and one replica. cfg adjusts the api.Config.
func newEnv(t testing.TB, cfg ...func(*api.Config)) *env {
	t.Helper()
	return newEnvHosts(t, "", cfg...)
}

// newEnvHosts is newEnv with presets allowed to point at mockHost (a cmd/mockllm server).
func newEnvHosts(t testing.TB, mockHost string, cfg ...func(*api.Config)) *env {
	t.Helper()
	return newEnvTools(t, mockHost, nil, cfg...)
}

// newEnvTools is newEnvHosts with tools registered beside the built-in ones.
func newEnvTools(t testing.TB, mockHost string, tools []*registry.Tool, cfg ...func(*api.Config)) *env {
	t.Helper()
	return newEnvPool(t, pgtest.Pool(t), mockHost, tools, cfg...)
}

// newEnvPool is newEnvTools over pool (a migrated database of this test).
func newEnvPool(t testing.TB, pool *pgxpool.Pool, mockHost string, tools []*registry.Tool, cfg ...func(*api.Config)) *env {
	t.Helper()
	return newEnvLoop(t, pool, mockHost, tools, nil, cfg...)
}

// newEnvLoop is newEnvPool whose replicas' agent loops loop adjusts (nil: the defaults).
func newEnvLoop(t testing.TB, pool *pgxpool.Pool, mockHost string, tools []*registry.Tool, loop func(*agentloop.Config), cfg ...func(*api.Config)) *env {
	t.Helper()
	e := &env{t: t, pool: pool, log: pgstore.NewStore(pool, pgstore.StoreConfig{}), mockHost: mockHost, tools: tools, loop: loop}
	tenants := pgstore.NewTenants(pool)
	a, keyA, err := tenants.TenantCreate(context.Background(), "tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	b, keyB, err := tenants.TenantCreate(context.Background(), "tenant-b")
	if err != nil {
		t.Fatal(err)
	}
	e.tenantA, e.keyA, e.tenantB, e.keyB = a.ID, keyA, b.ID, keyB
	e.replica = e.newReplica(cfg...)
	return e
}

// newReplica starts another API server over the same database.
func (e *env) newReplica(cfg ...func(*api.Config)) *replica {
	t := e.t
	t.Helper()
	hub := pgstore.NewHub(e.pool, pgstore.HubConfig{ReconnectDelay: 100 * time.Millisecond})
	if err := hub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	presets := pgstore.NewPresets(e.pool, preset.Rules{ModelHosts: e.modelHosts(), PolicyWebhookKey: testWebhookKey})
	tools, err := agents.BuiltinTools(true)
	if err != nil {
		t.Fatal(err)
	}
	tools = append(tools, e.tools...)
	quiet := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var ag *agents.Agents
	acfg := approval.Config{TimeoutFunc: func(a string) time.Duration { return ag.ApprovalTimeout(a) },
		PolicyFunc: func(a string) string { p, _ := ag.ApprovalPolicy(a); return p }}
	approvals := approval.New(acfg)
	if e.approvals != nil {
		approvals = e.approvals(acfg)
	}
	var approver registry.Approver
	if approvals != nil {
		approver = approvals
	}
	creds := pgstore.NewCredentials(e.pool, testCredentialKeys)
	var code *codemode.Runtime
	if e.code {
		if code, err = codemode.New(codemode.Config{Logger: quiet}); err != nil {
			t.Fatal(err)
		}
	}
	loop := agentloop.Config{Logger: quiet, RetryBackoff: time.Millisecond}
	if e.loop != nil {
		e.loop(&loop)
	}
	ag, err = agents.New(agents.Config{Tools: tools, ModelHosts: e.modelHosts(), Logger: quiet, Approvals: approver,
		Loop: loop, Credentials: creds, CodeRuntime: code})
	if err != nil {
		t.Fatal(err)
	}
	quotas := pgstore.NewQuotas(e.pool, pgstore.QuotasConfig{})
	wcfg := worker.Config{Store: e.log, Hub: hub, Presets: presets, Agents: ag, Approvals: approvals,
		LeaseTTL: 2 * time.Second, SweepInterval: 200 * time.Millisecond, Logger: quiet, Quotas: quotas}
	if e.worker != nil {
		e.worker(&wcfg)
	}
	wk, err := worker.New(wcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := wk.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := api.Config{
		Tenants:    pgstore.NewTenants(e.pool),
		Presets:    presets,
		Log:        e.log,
		Hub:        hub,
		Turns:      wk,
		Prompts:    agents.Prompter{Agents: ag, Presets: presets},
		Logger:     slog.New(slog.NewJSONHandler(io.Discard, nil)),
		AdminToken: adminToken,

		Credentials: creds,
		Quotas:      quotas,
	}
	for _, f := range cfg {
		f(&c)
	}
	srv := api.New(c)
	// As in cmd/server: the replica's streams take batches committed in this process without a
	// read. Replicas of a test share one store, so the latest replica gets them; the others read.
	e.log.OnCommit(srv.Publish)
	ts := httptest.NewServer(srv)
	kinServe(t, ts.URL)
	t.Cleanup(func() {
		srv.Close() // ends streams, so that ts.Close does not wait for them
		ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = wk.Stop(ctx)
		hub.Stop()
	})
	return &replica{api: srv, url: ts.URL}
}

// response is a finished HTTP exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request with key as the bearer token ("" for none) and body as JSON (a string or
// []byte is sent as is; nil sends nothing).
func (r *replica) do(t testing.TB, method, path, key string, body any, headers ...string) response {
	t.Helper()
	return r.send(t, context.Background(), method, path, key, body, headers...)
}

// doLenient is do for a request the server accepts though openapi.yaml does not promise it will
// (a test of that leniency): only the response is validated against openapi.yaml.
func (r *replica) doLenient(t testing.TB, method, path, key string, body any, headers ...string) response {
	t.Helper()
	return r.send(t, contracttest.Lenient(context.Background()), method, path, key, body, headers...)
}

// send is do with the request's context ctx.
func (r *replica) send(t testing.TB, ctx context.Context, method, path, key string, body any, headers ...string) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		js, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := harnessClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// doNoType is do with the body sent without a Content-Type, as a bare Go client sends it. The
// server reads such a body as JSON, as openapi.yaml's description says, but OpenAPI cannot say
// so of an operation: only the response is validated against openapi.yaml.
func (r *replica) doNoType(t testing.TB, method, path, key, body string) response {
	t.Helper()
	ctx := contracttest.Lenient(context.Background())
	req, err := http.NewRequestWithContext(ctx, method, r.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := harnessClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// json decodes the body into v, failing the test when it is not JSON.
func (r response) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("body %s: %v", r.body, err)
	}
}

// want fails the test unless the status is status.
func (r response) want(t testing.TB, status int) response {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	return r
}

// wantProblem fails the test unless r is a problem+json document with status and code.
func (r response) wantProblem(t testing.TB, status int, code string) api.Problem {
	t.Helper()
	r.want(t, status)
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q, want application/problem+json; body %s", ct, r.body)
	}
	var p api.Problem
	r.json(t, &p)
	if p.Status != status || p.Code != code || p.Title == "" || p.Type == "" || p.Detail == "" {
		t.Fatalf("problem %+v, want status %d code %s with type, title and detail", p, status, code)
	}
	return p
}

const minimalPreset = `{"name":"p","model":{"provider":"scripted","model":"default"}}`

// presetCreate creates a preset for key and returns its id.
func (r *replica) presetCreate(t testing.TB, key, body string) uuid.UUID {
	t.Helper()
	var p struct{ ID uuid.UUID }
	r.do(t, "POST", "/v1/presets", key, body).want(t, http.StatusCreated).json(t, &p)
	return p.ID
}

// sessionCreate creates a session of a new minimal preset for key and returns its id.
func (r *replica) sessionCreate(t testing.TB, key string) uuid.UUID {
	t.Helper()
	pid := r.presetCreate(t, key, minimalPreset)
	var s struct{ ID uuid.UUID }
	r.do(t, "POST", "/v1/sessions", key, map[string]any{"presetId": pid}).want(t, http.StatusCreated).json(t, &s)
	return s.ID
}

// Event constructors for appending test logs directly through the store.
func turnStart(n int) eventlog.NewEvent {
	return eventlog.NewEvent{Type: "turn/start", Data: map[string]int{"turn": n}}
}

func turnEnd(n int) eventlog.NewEvent {
	return eventlog.NewEvent{Type: "turn/end", Data: map[string]any{"turn": n, "reason": map[string]string{"kind": "completed"}}}
}

func stepStart(t, s int) eventlog.NewEvent {
	return eventlog.NewEvent{Type: "step/start", Data: map[string]int{"turn": t, "step": s}}
}

func stepEnd(t, s int) eventlog.NewEvent {
	return eventlog.NewEvent{Type: "step/end", Data: map[string]int{"turn": t, "step": s}}
}

func chunk(t, s int, text string) eventlog.NewEvent {
	return eventlog.NewEvent{Type: "assistant/chunk", Data: map[string]any{"turn": t, "step": s,
		"chunk": map[string]string{"type": "text-delta", "text": text}}}
}

// appendEvents appends to a session of tenant A, failing the test on error.
func (e *env) appendEvents(sessionID uuid.UUID, evs ...eventlog.NewEvent) []eventlog.Event {
	e.t.Helper()
	out, err := e.log.Journal(nil, e.tenantA, sessionID, uuid.Nil).Append(context.Background(), eventlog.Batch(evs...))
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func uuidOf(t testing.TB, s string) uuid.UUID {
	t.Helper()
	id, err := uuid.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
