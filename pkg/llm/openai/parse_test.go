package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dshd/dshd/pkg/llm"
)

// parse runs a body through the stream's SSE reader and assembler, as a response would.
func parse(body []byte) ([]llm.Chunk, error) {
	ctx, cancel := context.WithCancelCause(context.Background())
	r := bytes.NewReader(body)
	s := newSSEStream(ctx, ctx, cancel, nil, io.NopCloser(r), r)
	defer s.Close()
	var out []llm.Chunk
	for {
		c, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, c)
	}
}

func sse(events ...string) []byte {
	var b strings.Builder
	for _, e := range events {
		b.WriteString("data: " + e + "\n\n")
	}
	return []byte(b.String())
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestParseStream(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body []byte
		want []llm.Chunk
		code string
	}{{
		name: "DeepSeek: reasoning, text, usage with the finish, keep-alives, CRLF",
		body: []byte(": keep-alive\r\n\r\n" + string(sse(
			`{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":"Hm"}}]}`,
			`{"choices":[{"index":0,"delta":{"content":"Hi"}}]}`,
			`{"choices":[{"index":0,"delta":{"content":"!"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13,"prompt_cache_hit_tokens":8,"prompt_cache_miss_tokens":2,"completion_tokens_details":{"reasoning_tokens":1}}}`,
			`[DONE]`))),
		want: []llm.Chunk{
			llm.BlockStartChunk(0, llm.BlockReasoning), llm.ReasoningDeltaChunk(0, "Hm"),
			llm.BlockEndChunk(0, llm.Block{Type: llm.BlockReasoning, Text: "Hm"}),
			llm.BlockStartChunk(1, llm.BlockText), llm.TextDeltaChunk(1, "Hi"), llm.TextDeltaChunk(1, "!"),
			llm.BlockEndChunk(1, llm.TextBlock("Hi!")),
			llm.UsageChunk(llm.Usage{InputTokens: 10, OutputTokens: 3, CacheReadTokens: 8, CacheMissTokens: 2, ReasoningTokens: 1}),
			llm.FinishChunk(llm.FinishStop),
		},
	}, {
		name: "tool calls without index, finish stop with calls, OpenAI cached tokens, no [DONE]",
		body: sse(
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\""}}]}}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":":1}"}}]}}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"b","function":{"name":"g","arguments":"{}"}}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":3}}}`),
		want: []llm.Chunk{
			llm.BlockStartChunk(0, llm.BlockToolCall), llm.ToolCallDeltaChunk(0, "a", "f", `{"x"`),
			llm.ToolCallDeltaChunk(0, "a", "f", ":1}"),
			llm.BlockStartChunk(1, llm.BlockToolCall), llm.ToolCallDeltaChunk(1, "b", "g", "{}"),
			llm.BlockEndChunk(0, llm.ToolCallBlock("a", "f", `{"x":1}`)),
			llm.BlockEndChunk(1, llm.ToolCallBlock("b", "g", "{}")),
			llm.UsageChunk(llm.Usage{InputTokens: 4, OutputTokens: 2, CacheReadTokens: 3}),
			llm.FinishChunk(llm.FinishToolCalls),
		},
	}, {
		name: "an event's data split over two lines, length finish",
		body: []byte("data: {\"choices\":[{\"index\":0,\ndata: \"delta\":{\"content\":\"x\"},\"finish_reason\":\"length\"}]}\n\ndata:[DONE]\n\n"),
		want: []llm.Chunk{
			llm.BlockStartChunk(0, llm.BlockText), llm.TextDeltaChunk(0, "x"),
			llm.BlockEndChunk(0, llm.TextBlock("x")), llm.FinishChunk(llm.FinishMaxTokens),
		},
	},
		{name: "only keep-alives", body: []byte(strings.Repeat(": keep-alive\n\n", 3)), code: llm.CodeEmptyResponse},
		{name: "done without content", body: sse(`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, "[DONE]"), code: llm.CodeEmptyResponse},
		{name: "cut off", body: sse(`{"choices":[{"index":0,"delta":{"content":"x"}}]}`), code: llm.CodeTransport},
		{name: "error object in the stream", body: sse(`{"error":{"message":"Rate limit reached","type":"rate_limit"}}`), code: llm.CodeRateLimit},
		{name: "insufficient system resource", body: sse(`{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"insufficient_system_resource"}]}`, "[DONE]"), code: llm.CodeServer},
		{name: "a tool call without a name", body: sse(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`, "[DONE]"), code: llm.CodeTransport},
		{name: "not JSON", body: sse(`{"choices":`), code: llm.CodeTransport},
	}
	for _, tt := range tests {
		got, err := parse(tt.body)
		if llm.ErrorCode(err) != tt.code || (tt.code == "" && err != nil) {
			t.Errorf("%s: err %v, want code %q", tt.name, err, tt.code)
			continue
		}
		if tt.code == "" && mustJSON(t, got) != mustJSON(t, tt.want) {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, mustJSON(t, got), mustJSON(t, tt.want))
		}
	}
}

func TestStatusError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status    int
		body      string
		code      string
		retryable bool
	}{
		{401, `{"error":{"message":"Authentication Fails"}}`, llm.CodeInvalidCredential, false},
		{403, `forbidden`, llm.CodeInvalidCredential, false},
		{402, `{"error":{"message":"Insufficient Balance"}}`, llm.CodeQuota, false},
		{429, `{"error":{"message":"You exceeded your current quota","code":"insufficient_quota"}}`, llm.CodeQuota, false},
		{429, `{"error":{"message":"Rate limit"}}`, llm.CodeRateLimit, true},
		{400, `{"error":{"message":"This model's maximum context length is 65536 tokens."}}`, llm.CodeContextWindowExceeded, false},
		{400, `{"error":{"message":"Invalid request"}}`, llm.CodeServer, false},
		{408, ``, llm.CodeTimeout, true},
		{500, ``, llm.CodeServer, true},
		{503, `{"error":{"message":"Server overloaded"}}`, llm.CodeServer, true},
		{502, `<html>internal proxy 10.0.0.7:8080</html>`, llm.CodeServer, true},
		{302, ``, llm.CodeServer, false},
		{402, `insufficient balance`, llm.CodeQuota, false},
		{400, `prompt is too long`, llm.CodeContextWindowExceeded, false},
		{404, `{"error":"model \"x\" not found"}`, llm.CodeServer, false},
		{422, `{"message":"bad field"}`, llm.CodeServer, false},
	}
	for _, tt := range tests {
		e := statusError(tt.status, []byte(tt.body))
		if e.Code != tt.code || e.Retryable != tt.retryable || e.Status != tt.status || e.Message == "" {
			t.Errorf("%d %s: %+v, want %s retryable=%v", tt.status, tt.body, e, tt.code, tt.retryable)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		h    string
		want time.Duration
		ok   bool
	}{
		{"3", 3 * time.Second, true},
		{"0.5", 500 * time.Millisecond, true},
		{now.Add(10 * time.Second).Format(http1123), 10 * time.Second, true},
		{now.Add(-10 * time.Second).Format(http1123), 0, true},
		{"", 0, false},
		{"soon", 0, false},
		{"-1", 0, false},
	}
	for _, tt := range tests {
		got, ok := retryAfter(tt.h, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("retryAfter(%q) = %v, %v; want %v, %v", tt.h, got, ok, tt.want, tt.ok)
		}
	}
}

const http1123 = "Mon, 02 Jan 2006 15:04:05 GMT"

// FuzzParseChunk feeds arbitrary bodies to the SSE reader and assembler: no input may panic,
// and every outcome is chunks ending with finish, or an *llm.Error.
func FuzzParseChunk(f *testing.F) {
	f.Add(sse(`{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}`, "[DONE]"))
	f.Add(sse(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":3,"id":"x","function":{"name":"f","arguments":"{"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":3,"function":{"arguments":"}"}}]},"finish_reason":"tool_calls"}]}`, "[DONE]"))
	f.Add([]byte(": keep-alive\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"r\"}}]}\r\n\r\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"error\":{\"message\":\"boom\"}}\n\n"))
	f.Add([]byte("event: x\nid: 1\nretry: 5\ndata\n\ndata: {\"choices\":[{\"index\":-1}]}\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		chunks, err := parse(body)
		if err != nil {
			var e *llm.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is not an *llm.Error", err)
			}
			return
		}
		if len(chunks) == 0 || chunks[len(chunks)-1].Type != llm.ChunkFinish {
			t.Fatalf("a healthy end without a finish chunk: %v", chunks)
		}
	})
}

// BenchmarkParseChunks measures SSE parsing and assembly of a streamed answer of 500 text
// deltas and 20 tool calls in 8-byte pieces.
func BenchmarkParseChunks(b *testing.B) {
	var events []string
	events = append(events, `{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`)
	for i := range 500 {
		events = append(events, fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","model":"deepseek-chat","choices":[{"index":0,"delta":{"content":" word%d"},"finish_reason":null}]}`, i))
	}
	for c := range 20 {
		events = append(events, fmt.Sprintf(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":%d,"id":"call_%d","type":"function","function":{"name":"echo","arguments":""}}]}}]}`, c, c))
		for range 6 {
			events = append(events, fmt.Sprintf(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":%d,"function":{"arguments":"\"abcdef\""}}]}}]}`, c))
		}
	}
	events = append(events, `{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":100,"completion_tokens":600}}`, "[DONE]")
	body := sse(events...)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parse(body); err != nil {
			b.Fatal(err)
		}
	}
}

// TestStatusErrorMessage: only the provider's JSON error message reaches the error, clipped and
// without control characters; any other body gives "HTTP <status>".
func TestStatusErrorMessage(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 400)
	for _, tt := range []struct {
		status int
		body   string
		want   string
	}{
		{502, "<html><body>nginx at 10.0.0.7:8080 secret-token</body></html>", "HTTP 502"},
		{500, "", "HTTP 500"},
		{500, "   \n", "HTTP 500"},
		{403, "Forbidden: key sk-abc for internal.corp", "HTTP 403"},
		{400, `{"error":{"message":"Invalid request"}}`, "Invalid request"},
		{400, `{"error":{"message":"bad\u001b[31m red\r\nline\u0000 two\u200b"}}`, "bad [31m red line two"},
		{404, `{"error":"model not found"}`, "model not found"},
		{422, `{"message":"bad field","detail":"x"}`, "bad field"},
		{400, `{"error":{"message":"\u0000\u0001"}}`, "HTTP 400"},
		{400, `{"error":{"message":""},"message":"outer"}`, "outer"},
		// One word longer than the limit is dropped whole (it may be a secret); words are kept
		// up to the limit.
		{400, `{"error":{"message":"` + long + `"}}`, "..."},
		{400, `{"error":{"message":"` + strings.Repeat("word ", 70) + `"}}`, "word" + strings.Repeat(" word", 59) + "..."},
		{400, `{"data":"no error field"}`, "HTTP 400"},
	} {
		e := statusError(tt.status, []byte(tt.body))
		if e.Message != tt.want {
			t.Errorf("%d %q: message %q, want %q", tt.status, tt.body, e.Message, tt.want)
		}
		if len(e.Message) > maxErrorMessage+3 || !utf8.ValidString(e.Message) {
			t.Errorf("%d: message of %d bytes", tt.status, len(e.Message))
		}
	}
	// An error inside a 200 stream is cleaned the same way.
	if e := apiError(0, APIError{Message: "a\tb\x1b"}); e.Message != "a b" {
		t.Errorf("stream error message %q", e.Message)
	}
}
