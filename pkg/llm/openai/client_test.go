package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/llm/openai"
	"github.com/dshd/dshd/pkg/llm/scripted"
)

// startMock starts mockllm on a real port for the test and returns it with its /v1 URL.
func startMock(t testing.TB, cfg mockllm.Config) (*mockllm.Server, string) {
	t.Helper()
	ms := mockllm.New(cfg)
	srv := httptest.NewServer(ms.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(ms.Close) // runs first: releases handlers still waiting
	return ms, srv.URL + "/v1"
}

// recordSleep records the retry waits and returns at once.
type recordSleep struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (r *recordSleep) sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	r.waits = append(r.waits, d)
	r.mu.Unlock()
	return ctx.Err()
}

func (r *recordSleep) recorded() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.waits...)
}

func newClient(base string, rec *recordSleep, edit func(*openai.Config)) *openai.Client {
	cfg := openai.Config{BaseURL: base, APIKey: "sk-test", Model: "mock-model", SleepFunc: rec.sleep}
	if edit != nil {
		edit(&cfg)
	}
	return openai.New(cfg)
}

func userRequest(script string) llm.Request {
	return llm.Request{
		System:   "You are a test.",
		Messages: []llm.Message{llm.NewUserMessage("m1", script)},
		Tools: []llm.ToolSchema{{Name: "echo", Description: "Echo the text back.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)}},
	}
}

// call runs one request to the end and closes the stream.
func call(t *testing.T, c *openai.Client, req llm.Request) (llm.Result, error) {
	t.Helper()
	s, err := c.Stream(context.Background(), req)
	if err != nil {
		return llm.Result{}, err
	}
	defer s.Close()
	return llm.ReadAll(s)
}

func jsonOf(t testing.TB, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestStreamParallelToolCallsInPieces(t *testing.T) {
	t.Parallel()
	_, base := startMock(t, mockllm.Config{})
	req := userRequest("tools:4 chunks:5 reasoning:let%20me%20think")
	res, err := call(t, newClient(base, &recordSleep{}, nil), req)
	if err != nil {
		t.Fatal(err)
	}
	// The client rebuilds exactly the chunk sequence the scripted model planned, usage included.
	want := scripted.Respond(req).Chunks
	if got := jsonOf(t, res.Chunks); got != jsonOf(t, want) {
		t.Fatalf("chunks differ\n got %s\nwant %s", got, jsonOf(t, want))
	}
	if res.Finish != llm.FinishToolCalls || len(res.Blocks) != 5 || res.Blocks[0].Type != llm.BlockReasoning {
		t.Fatalf("finish %q, blocks %s", res.Finish, jsonOf(t, res.Blocks))
	}
	for i, b := range res.Blocks[1:] {
		if b.Type != llm.BlockToolCall || b.Name != "echo" || !json.Valid([]byte(b.Arguments)) {
			t.Fatalf("block %d: %s", i+1, jsonOf(t, b))
		}
	}
	deltas := 0
	for _, c := range res.Chunks {
		if c.Type == llm.ChunkToolCallDelta && *c.Index == 1 {
			deltas++
		}
	}
	if deltas < 4 {
		t.Fatalf("first call arrived in %d deltas, want its arguments in several pieces", deltas)
	}
}

func TestStreamKeepAliveLines(t *testing.T) {
	t.Parallel()
	_, base := startMock(t, mockllm.Config{})
	res, err := call(t, newClient(base, &recordSleep{}, nil), userRequest("text keepalive:500"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Finish != llm.FinishStop || res.Blocks[0].Text != "Done after 0 steps and 0 tool results." {
		t.Fatalf("finish %q, blocks %s", res.Finish, jsonOf(t, res.Blocks))
	}
	if res.Usage == nil || res.Usage.InputTokens == 0 {
		t.Fatalf("usage %+v", res.Usage)
	}
}

func TestStreamMidStreamDisconnect(t *testing.T) {
	t.Parallel()
	ms, base := startMock(t, mockllm.Config{})
	res, err := call(t, newClient(base, &recordSleep{}, nil), userRequest("tools:2 fail:TRANSPORT"))
	var e *llm.Error
	if !errors.As(err, &e) || e.Code != llm.CodeTransport || !strings.Contains(e.Message, "read stream") {
		t.Fatalf("err %v, want TRANSPORT on reading the stream", err)
	}
	if len(res.Chunks) == 0 || res.Finish != "" {
		t.Fatalf("got %d chunks and finish %q before the disconnect", len(res.Chunks), res.Finish)
	}
	if n := len(ms.Requests()); n != 1 {
		t.Fatalf("%d requests: a stream that has started is not retried", n)
	}
}

func TestStreamRateLimitRetryAfterThenSuccess(t *testing.T) {
	t.Parallel()
	ms, base := startMock(t, mockllm.Config{})
	rec := &recordSleep{}
	res, err := call(t, newClient(base, rec, nil), userRequest("text fail:RATE_LIMIT failtimes:1 retryafter:7"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Finish != llm.FinishStop {
		t.Fatalf("finish %q", res.Finish)
	}
	if waits := rec.recorded(); len(waits) != 1 || waits[0] != 7*time.Second {
		t.Fatalf("waits %v, want [7s] from Retry-After", waits)
	}
	if n := len(ms.Requests()); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
}

// TestStreamSingleAttemptCarriesRetryAfter: with MaxAttempts 1 (how the agent loop builds its
// clients) a 429 is one request, and the error carries the provider's Retry-After for the
// caller that retries.
func TestStreamSingleAttemptCarriesRetryAfter(t *testing.T) {
	t.Parallel()
	ms, base := startMock(t, mockllm.Config{})
	rec := &recordSleep{}
	_, err := call(t, newClient(base, rec, func(c *openai.Config) { c.MaxAttempts = 1 }), userRequest("text fail:RATE_LIMIT retryafter:7"))
	var e *llm.Error
	if !errors.As(err, &e) || e.Code != llm.CodeRateLimit || e.Status != 429 || !e.Retryable || e.RetryAfter != 7*time.Second {
		t.Fatalf("err %#v, want a retryable RATE_LIMIT 429 with RetryAfter 7s", err)
	}
	if n := len(ms.Requests()); n != 1 || len(rec.recorded()) != 0 {
		t.Fatalf("%d requests, waits %v; want one request and no wait", n, rec.recorded())
	}
}

func TestStreamRetryAfterTooLongIsNotWaited(t *testing.T) {
	t.Parallel()
	ms, base := startMock(t, mockllm.Config{})
	rec := &recordSleep{}
	// The script clamps retryafter to 60 seconds, so the client here waits at most 59.
	c := newClient(base, rec, func(c *openai.Config) { c.MaxRetryAfter = 59 * time.Second })
	_, err := call(t, c, userRequest("text fail:RATE_LIMIT retryafter:60"))
	if llm.ErrorCode(err) != llm.CodeRateLimit || len(rec.recorded()) != 0 || len(ms.Requests()) != 1 {
		t.Fatalf("err %v, waits %v, %d requests", err, rec.recorded(), len(ms.Requests()))
	}
}

func TestStreamServerErrorsUntilRetriesRunOut(t *testing.T) {
	t.Parallel()
	ms, base := startMock(t, mockllm.Config{})
	rec := &recordSleep{}
	c := newClient(base, rec, func(cfg *openai.Config) {
		cfg.MaxAttempts, cfg.BaseBackoff, cfg.MaxBackoff = 4, 100*time.Millisecond, 250*time.Millisecond
	})
	_, err := call(t, c, userRequest("text fail:SERVER"))
	var e *llm.Error
	if !errors.As(err, &e) || e.Code != llm.CodeServer || e.Status != 500 || !e.Retryable {
		t.Fatalf("err %v, want SERVER 500", err)
	}
	if n := len(ms.Requests()); n != 4 {
		t.Fatalf("%d requests, want 4 attempts", n)
	}
	bounds := [][2]time.Duration{{50, 100}, {100, 200}, {125, 250}}
	waits := rec.recorded()
	if len(waits) != 3 {
		t.Fatalf("waits %v, want 3", waits)
	}
	for i, w := range waits {
		if w < bounds[i][0]*time.Millisecond || w > bounds[i][1]*time.Millisecond {
			t.Fatalf("wait %d = %v, want within %v ms (exponential backoff with jitter)", i, w, bounds[i])
		}
	}
}

func TestStreamTransportErrorBeforeFirstByteIsRetried(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	rec := &recordSleep{}
	_, err = call(t, newClient("http://"+addr+"/v1", rec, func(cfg *openai.Config) { cfg.MaxAttempts = 3 }), userRequest("text"))
	if llm.ErrorCode(err) != llm.CodeTransport || len(rec.recorded()) != 2 {
		t.Fatalf("err %v, waits %v; want TRANSPORT after 3 attempts", err, rec.recorded())
	}
}

func TestStreamMalformedChunk(t *testing.T) {
	t.Parallel()
	_, base := startMock(t, mockllm.Config{})
	res, err := call(t, newClient(base, &recordSleep{}, nil), userRequest("text fail:MALFORMED"))
	var e *llm.Error
	if !errors.As(err, &e) || e.Code != llm.CodeTransport || !strings.Contains(e.Message, "malformed stream chunk") {
		t.Fatalf("err %v, want a TRANSPORT error naming the malformed chunk", err)
	}
	if len(res.Chunks) == 0 {
		t.Fatal("no chunks before the malformed one")
	}
}

func TestStreamCancelMidStream(t *testing.T) {
	t.Parallel()
	_, base := startMock(t, mockllm.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := newClient(base, &recordSleep{}, nil).Stream(ctx, userRequest("tools:1 chunkdelay:3600000"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	// The next chunk is an hour away: Recv blocks until the cancel reaches it.
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := s.Recv(); err != nil {
				done <- err
				return
			}
		}
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Recv after cancel: %v, want context.Canceled", err)
	}
	if _, err := s.Recv(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Recv again: %v, want the same error", err)
	}
}

func TestStreamIdleTimeout(t *testing.T) {
	t.Parallel()
	_, base := startMock(t, mockllm.Config{})
	c := newClient(base, &recordSleep{}, func(cfg *openai.Config) { cfg.IdleTimeout = 50 * time.Millisecond })
	_, err := call(t, c, userRequest("text fail:TIMEOUT"))
	if llm.ErrorCode(err) != llm.CodeTimeout {
		t.Fatalf("err %v, want TIMEOUT", err)
	}
}

func TestStreamToolCallWithoutResultIsRejected(t *testing.T) {
	t.Parallel()
	ms, base := startMock(t, mockllm.Config{})
	req := userRequest("tools:1")
	req.Messages = append(req.Messages, llm.Message{ID: "m2", Role: llm.RoleAssistant,
		Source:  llm.Source{Kind: llm.SourceModel, Provider: "openai", Model: "m"},
		Content: []llm.Block{llm.ToolCallBlock("call_1_1", "echo", `{"text":"x"}`)}})
	_, err := call(t, newClient(base, &recordSleep{}, nil), req)
	var e *llm.Error
	if !errors.As(err, &e) || e.Status != 400 || e.Retryable || !strings.Contains(e.Message, "call_1_1") {
		t.Fatalf("err %v, want a non-retryable 400 naming the call", err)
	}
	if n := len(ms.Requests()); n != 1 {
		t.Fatalf("%d requests, a 400 is not retried", n)
	}
}

func TestStreamErrorCodes(t *testing.T) {
	t.Parallel()
	_, base := startMock(t, mockllm.Config{})
	c := newClient(base, &recordSleep{}, nil)
	tests := []struct {
		script string
		code   string
		status int
	}{
		{"fail:INVALID_CREDENTIAL", llm.CodeInvalidCredential, 401},
		{"fail:QUOTA", llm.CodeQuota, 402},
		{"fail:CONTEXT_WINDOW_EXCEEDED", llm.CodeContextWindowExceeded, 400},
		{"fail:EMPTY_RESPONSE", llm.CodeEmptyResponse, 0},
	}
	for _, tt := range tests {
		_, err := call(t, c, userRequest("text "+tt.script))
		var e *llm.Error
		if !errors.As(err, &e) || e.Code != tt.code || e.Status != tt.status || e.Retryable {
			t.Errorf("%s: err %#v, want non-retryable %s status %d", tt.script, err, tt.code, tt.status)
		}
	}
}

func TestStreamAPIKey(t *testing.T) {
	t.Parallel()
	_, base := startMock(t, mockllm.Config{APIKey: "sk-right"})
	_, err := call(t, newClient(base, &recordSleep{}, func(cfg *openai.Config) { cfg.APIKey = "sk-wrong" }), userRequest("text"))
	if llm.ErrorCode(err) != llm.CodeInvalidCredential {
		t.Fatalf("wrong key: %v", err)
	}
	if _, err := call(t, newClient(base, &recordSleep{}, func(cfg *openai.Config) { cfg.APIKey = "sk-right" }), userRequest("text")); err != nil {
		t.Fatalf("right key: %v", err)
	}
}

func TestNonStreamingGivesTheSameBlocks(t *testing.T) {
	t.Parallel()
	ms, base := startMock(t, mockllm.Config{})
	for _, script := range []string{"tools:3 reasoning:why%20not", "text", "maxtokens"} {
		streamed, err := call(t, newClient(base, &recordSleep{}, nil), userRequest(script))
		if err != nil {
			t.Fatal(err)
		}
		whole, err := call(t, newClient(base, &recordSleep{}, func(cfg *openai.Config) { cfg.NonStreaming = true }), userRequest(script))
		if err != nil {
			t.Fatal(err)
		}
		if jsonOf(t, whole.Blocks) != jsonOf(t, streamed.Blocks) || whole.Finish != streamed.Finish ||
			jsonOf(t, whole.Usage) != jsonOf(t, streamed.Usage) {
			t.Fatalf("%s: non-streamed %s %q %+v, streamed %s %q %+v", script, jsonOf(t, whole.Blocks), whole.Finish,
				whole.Usage, jsonOf(t, streamed.Blocks), streamed.Finish, streamed.Usage)
		}
	}
	var last openai.ChatRequest
	reqs := ms.Requests()
	if err := json.Unmarshal(reqs[len(reqs)-1], &last); err != nil || last.Stream || last.StreamOptions != nil {
		t.Fatalf("non-streamed request %s (%v)", reqs[len(reqs)-1], err)
	}
	_, err := call(t, newClient(base, &recordSleep{}, func(cfg *openai.Config) { cfg.NonStreaming = true }), userRequest("text fail:MALFORMED"))
	if llm.ErrorCode(err) != llm.CodeTransport {
		t.Fatalf("malformed non-streamed response: %v", err)
	}
}

func TestStreamCloseUnblocksRecv(t *testing.T) {
	t.Parallel()
	_, base := startMock(t, mockllm.Config{})
	s, err := newClient(base, &recordSleep{}, nil).Stream(context.Background(), userRequest("text chunkdelay:3600000"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := s.Recv(); err != nil {
				done <- err
				return
			}
		}
	}()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil || llm.ErrorCode(err) != "" {
		t.Fatalf("Recv after Close: %v, want the closed-stream error", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
