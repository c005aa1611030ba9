package agentloop

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/llm/openai"
)

// mockHarness is a harness whose model is cmd/mockllm's server behind real HTTP, reached by an
// openai client that does not retry by itself (MaxAttempts 1, as pkg/agents builds it).
func mockHarness(t *testing.T) (*harness, *mockllm.Server) {
	t.Helper()
	ms := mockllm.New(mockllm.Config{})
	srv := httptest.NewServer(ms.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(ms.Close) // runs first: releases handlers still waiting
	h := newHarness(t, openai.New(openai.Config{BaseURL: srv.URL + "/v1", MaxAttempts: 1}))
	h.cfg.Model = llm.Config{Provider: "openai", Model: "mock"}
	return h, ms
}

func retries(n int) *int { return &n }

// jsonEqual reports whether two JSON texts hold the same value, whatever their key order.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}

// failureChunks returns the failures of the error finish chunks of the log.
func failureChunks(t *testing.T, h *harness) []llm.Failure {
	t.Helper()
	var out []llm.Failure
	for _, ev := range h.ofType(eventlog.TypeAssistantChunk) {
		c := decode[eventlog.AssistantChunk](t, ev.Data).Chunk
		if c.Type == llm.ChunkFinish && c.Reason != nil && c.Reason.Kind == llm.FinishError {
			if c.Reason.Failure == nil {
				t.Fatalf("error finish without failure: %s", ev.Data)
			}
			out = append(out, *c.Reason.Failure)
		}
	}
	return out
}

// TestLOOP4_RetriesWithinTheStep: a model answering 500 three times, then normally, with
// model.retries 3: four requests reach the server, each failed one leaves a failure chunk and
// an llm/retry (attempts 1 to 3, backoff doubling), all in one step, and the turn completes with
// a message citing only the chunks of the attempt that succeeded.
func TestLOOP4_RetriesWithinTheStep(t *testing.T) {
	t.Parallel()
	h, ms := mockHarness(t)
	h.cfg.ModelRetries = retries(3)
	h.post(eventlog.InboxNextTurn, "text fail:SERVER failtimes:3")
	if r := h.serve(context.Background()); len(r) != 1 || r[0].Kind != eventlog.EndCompleted {
		t.Fatalf("reasons %+v", r)
	}
	if n := len(ms.Requests()); n != 4 {
		t.Fatalf("%d requests reached the server, want 4", n)
	}
	evs := h.ofType(eventlog.TypeLLMRetry)
	if len(evs) != 3 {
		t.Fatalf("%d llm/retry events, want 3: %v", len(evs), h.types())
	}
	for i, ev := range evs {
		want := eventlog.LLMRetry{Turn: 1, Step: 1, Provider: "openai", Attempt: i + 1, MaxRetries: 3,
			DelayMs: float64(int64(1) << i), Code: llm.CodeServer, Status: 500}
		got := decode[eventlog.LLMRetry](t, ev.Data)
		want.Message = got.Message
		if got != want || got.Message == "" {
			t.Errorf("llm/retry %d = %s, want %+v", i, ev.Data, want)
		}
	}
	if f := failureChunks(t, h); len(f) != 3 || f[0].Code != llm.CodeServer || f[0].Status != 500 {
		t.Fatalf("failure chunks %+v, want 3 SERVER 500", f)
	}
	if n := len(h.ofType(eventlog.TypeStepStart)); n != 1 {
		t.Fatalf("%d steps, want 1", n)
	}
	// Each retry follows its attempt's failure chunk; the message cites only later chunks.
	all := h.j.Events()
	last := evs[len(evs)-1].Seq
	prev := all[last-1]
	if prev.Type != eventlog.TypeAssistantChunk || !strings.Contains(string(prev.Data), `"kind":"error"`) {
		t.Fatalf("event before llm/retry: %s %s", prev.Type, prev.Data)
	}
	msg := h.ofType(eventlog.TypeAssistantMessage)
	if len(msg) != 1 || len(msg[0].SourceEventSeqs) == 0 || msg[0].SourceEventSeqs[0] <= last {
		t.Fatalf("assistant/message %+v cites chunks of failed attempts (last llm/retry %d)", msg, last)
	}
	h.checkInvariants()
}

// TestLOOP4_FailedCallEndsWithFailureChunk: a model that keeps failing gets 1 + 2 requests
// (the default of two retries); the step ends with the failure chunk, then step/end, then
// turn/end with the same error.
func TestLOOP4_FailedCallEndsWithFailureChunk(t *testing.T) {
	t.Parallel()
	h, ms := mockHarness(t)
	h.post(eventlog.InboxNextTurn, "fail:SERVER")
	r := h.serve(context.Background())
	if len(r) != 1 || r[0].Kind != eventlog.EndError || r[0].Error.Code != llm.CodeServer || r[0].Error.Status != 500 {
		t.Fatalf("reasons %+v", r)
	}
	if n := len(ms.Requests()); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
	if n := len(h.ofType(eventlog.TypeLLMRetry)); n != 2 {
		t.Fatalf("%d llm/retry, want 2", n)
	}
	all := h.j.Events()
	tail := all[len(all)-3:]
	if tail[0].Type != eventlog.TypeAssistantChunk || tail[1].Type != eventlog.TypeStepEnd || tail[2].Type != eventlog.TypeTurnEnd {
		t.Fatalf("log ends %s %s %s", tail[0].Type, tail[1].Type, tail[2].Type)
	}
	c := decode[eventlog.AssistantChunk](t, tail[0].Data).Chunk
	end := decode[eventlog.TurnEnd](t, tail[2].Data).Reason.Error
	if c.Type != llm.ChunkFinish || c.Reason.Kind != llm.FinishError || c.Reason.Failure == nil || end == nil ||
		*c.Reason.Failure != (llm.Failure{Message: end.Message, Code: end.Code, Status: end.Status}) {
		t.Fatalf("failure chunk %s and turn/end %s differ", tail[0].Data, tail[2].Data)
	}
	var shape map[string]any
	_ = json.Unmarshal(tail[0].Data, &shape)
	failure := shape["chunk"].(map[string]any)["reason"].(map[string]any)["failure"].(map[string]any)
	if failure["code"] != "SERVER" || failure["status"] != 500.0 || failure["message"] == "" {
		t.Fatalf("failure %v", failure)
	}
	h.checkInvariants()
}

// TestLOOP4_RetryBudget: model.retries 0 sends one request; a failure that cannot succeed
// again (INVALID_CREDENTIAL) is not retried; a Retry-After beyond MaxRetryDelay is not waited
// for. Each ends with one failure chunk and no llm/retry.
func TestLOOP4_RetryBudget(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		script string
		edit   func(*Config)
		code   string
	}{
		"zero retries":         {"fail:SERVER", func(c *Config) { c.ModelRetries = retries(0) }, llm.CodeServer},
		"not retryable":        {"fail:INVALID_CREDENTIAL", func(c *Config) { c.ModelRetries = retries(5) }, llm.CodeInvalidCredential},
		"retry-after too long": {"fail:RATE_LIMIT retryafter:2", func(c *Config) { c.MaxRetryDelay = time.Second }, llm.CodeRateLimit},
		"negative means zero":  {"fail:SERVER", func(c *Config) { c.ModelRetries = retries(-1) }, llm.CodeServer},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h, ms := mockHarness(t)
			tc.edit(&h.cfg)
			h.post(eventlog.InboxNextTurn, tc.script)
			r := h.serve(context.Background())
			if len(r) != 1 || r[0].Kind != eventlog.EndError || r[0].Error.Code != tc.code {
				t.Fatalf("reasons %+v", r)
			}
			if n, rn, f := len(ms.Requests()), len(h.ofType(eventlog.TypeLLMRetry)), failureChunks(t, h); n != 1 || rn != 0 || len(f) != 1 || f[0].Code != tc.code {
				t.Fatalf("%d requests, %d llm/retry, failure chunks %+v", n, rn, f)
			}
			h.checkInvariants()
		})
	}
}

// TestLOOP4_RetryHonoursRetryAfter: a 429's Retry-After is the delay of the retry.
func TestLOOP4_RetryHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	h, ms := mockHarness(t)
	h.post(eventlog.InboxNextTurn, "text fail:RATE_LIMIT failtimes:1 retryafter:1")
	start := time.Now()
	if r := h.serve(context.Background()); r[0].Kind != eventlog.EndCompleted {
		t.Fatalf("reasons %+v", r)
	}
	evs := h.ofType(eventlog.TypeLLMRetry)
	if len(evs) != 1 || len(ms.Requests()) != 2 {
		t.Fatalf("%d llm/retry, %d requests", len(evs), len(ms.Requests()))
	}
	if d := decode[eventlog.LLMRetry](t, evs[0].Data); d.DelayMs != 1000 || d.Code != llm.CodeRateLimit || d.Status != 429 {
		t.Fatalf("llm/retry %s", evs[0].Data)
	}
	if time.Since(start) < time.Second {
		t.Fatal("the retry did not wait for Retry-After")
	}
}

// cancelOnRetry is a slog handler that cancels when the loop logs that it is about to wait for
// a retry: by then the llm/retry event is committed.
type cancelOnRetry struct {
	slog.Handler
	cancel context.CancelFunc
}

func (cancelOnRetry) Enabled(context.Context, slog.Level) bool { return true }

func (c cancelOnRetry) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "retrying") {
		c.cancel()
	}
	return nil
}

// TestLOOP7_CancelDuringRetryWait: a cancel while the loop waits to retry aborts the turn at
// once; the retry that was scheduled stays in the log.
func TestLOOP7_CancelDuringRetryWait(t *testing.T) {
	t.Parallel()
	h, ms := mockHarness(t)
	h.cfg.RetryBackoff = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.cfg.Logger = slog.New(cancelOnRetry{Handler: slog.DiscardHandler, cancel: cancel})
	h.post(eventlog.InboxNextTurn, "fail:SERVER")
	start := time.Now()
	r := h.serve(ctx)
	if len(r) != 1 || r[0].Kind != eventlog.EndAborted || time.Since(start) > 30*time.Second {
		t.Fatalf("reasons %+v after %v", r, time.Since(start))
	}
	if n, rn := len(ms.Requests()), len(h.ofType(eventlog.TypeLLMRetry)); n != 1 || rn != 1 {
		t.Fatalf("%d requests, %d llm/retry", n, rn)
	}
	h.checkInvariants()
}

// TestLOOP3_HeaderRecordsEffectiveConfig: request/header records the provider's defaults for
// what the preset leaves unset, marked in adapterDefaults, as the reference logs do;
// request/context carries the context window; the request is sent with the same values.
func TestLOOP3_HeaderRecordsEffectiveConfig(t *testing.T) {
	t.Parallel()
	defaults := llm.Defaults{MaxTokens: 256000, ReasoningEffort: "off", ContextWindow: 1000000}
	for name, tc := range map[string]struct {
		model           llm.Config
		header, context string
		maxTokens       int
	}{
		"adapter defaults": {llm.Config{Provider: "deepseek", Model: "m"},
			`{"config":{"provider":"deepseek","model":"m","maxTokens":256000,"reasoningEffort":"off"},"adapterDefaults":{"maxTokens":true,"reasoningEffort":true}}`,
			`{"provider":"deepseek","model":"m","contextWindow":1000000}`, 256000},
		"preset maxTokens": {llm.Config{Provider: "deepseek", Model: "m", MaxTokens: 100},
			`{"config":{"provider":"deepseek","model":"m","maxTokens":100,"reasoningEffort":"off"},"adapterDefaults":{"reasoningEffort":true}}`,
			`{"provider":"deepseek","model":"m","contextWindow":1000000}`, 100},
		"no defaults": {llm.Config{Provider: "openai", Model: "m"},
			`{"config":{"provider":"openai","model":"m"}}`, `{"provider":"openai","model":"m"}`, 0},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h, ms := mockHarness(t)
			h.cfg.Model = tc.model
			if tc.maxTokens > 0 {
				h.cfg.ModelDefaults = defaults
			}
			h.post(eventlog.InboxNextTurn, "tools:1 steps:2") // three requests, one header
			if r := h.serve(context.Background()); r[0].Kind != eventlog.EndCompleted {
				t.Fatalf("reasons %+v", r)
			}
			hd := h.ofType(eventlog.TypeRequestHeader)
			if len(hd) != 1 || len(ms.Requests()) != 3 {
				t.Fatalf("%d headers for %d requests", len(hd), len(ms.Requests()))
			}
			var header map[string]json.RawMessage
			_ = json.Unmarshal(decode[map[string]json.RawMessage](t, hd[0].Data)["header"], &header)
			got, _ := json.Marshal(map[string]json.RawMessage{"config": header["config"], "adapterDefaults": header["adapterDefaults"]})
			if tc.maxTokens == 0 {
				got, _ = json.Marshal(map[string]json.RawMessage{"config": header["config"]})
			}
			if !jsonEqual(t, got, []byte(tc.header)) {
				t.Errorf("request/header %s, want %s", got, tc.header)
			}
			if ctx := h.ofType(eventlog.TypeRequestContext); len(ctx) != 1 || string(ctx[0].Data) != tc.context {
				t.Errorf("request/context %v, want %s", ctx, tc.context)
			}
			var sent openai.ChatRequest
			if err := json.Unmarshal(ms.Requests()[0], &sent); err != nil || sent.MaxTokens != tc.maxTokens || sent.ReasoningEffort != "" {
				t.Errorf("sent max_tokens %d reasoning_effort %q (%v), want %d and none (off)", sent.MaxTokens, sent.ReasoningEffort, err, tc.maxTokens)
			}
			// The same configuration in a new loop instance is a resume, and the header equal.
			h.post(eventlog.InboxNextTurn, "text")
			if _, err := NewRunner(h.cfg, h.j).Serve(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := headerReasons(t, h); len(got) != 2 || got[1] != "resume" {
				t.Fatalf("header reasons %v", got)
			}
			hd = h.ofType(eventlog.TypeRequestHeader)
			if !decode[eventlog.RequestHeader](t, hd[0].Data).Header.Equal(decode[eventlog.RequestHeader](t, hd[1].Data).Header) {
				t.Fatalf("headers differ: %s / %s", hd[0].Data, hd[1].Data)
			}
			if n := len(h.ofType(eventlog.TypeRequestContext)); n != 1 {
				t.Fatalf("%d request/context, want 1", n)
			}
			h.checkInvariants()
		})
	}
}
