package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ToolSchema is what the model sees of a tool (REG-4): name, description and the JSON Schema of
// its parameters.
type ToolSchema struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Config is the model configuration of a request. Provider names the adapter ("openai",
// "scripted"); Model the model id; BaseURL the endpoint for OpenAI-compatible providers.
type Config struct {
	Provider        string   `json:"provider"`
	Model           string   `json:"model"`
	BaseURL         string   `json:"baseUrl,omitempty"`
	MaxTokens       int      `json:"maxTokens,omitempty"`
	Temperature     *float64 `json:"temperature,omitempty"`
	ReasoningEffort string   `json:"reasoningEffort,omitempty"`
}

// Request is one frozen model call: configuration, system prompt, history and the ordered wire
// tools.
type Request struct {
	Config    Config       `json:"config"`
	System    string       `json:"system,omitempty"`
	Messages  []Message    `json:"messages"`
	Tools     []ToolSchema `json:"tools,omitempty"`
	SessionID string       `json:"sessionId,omitempty"`
}

// Usage counts tokens of one model call.
type Usage struct {
	InputTokens     int `json:"inputTokens"`
	OutputTokens    int `json:"outputTokens"`
	CacheReadTokens int `json:"cacheReadTokens,omitempty"`
	CacheMissTokens int `json:"cacheMissTokens,omitempty"`
	ReasoningTokens int `json:"reasoningTokens,omitempty"`
}

// Chunk types of the streaming vocabulary (the `assistant/chunk` event's `chunk`).
const (
	ChunkBlockStart     = "block-start"
	ChunkTextDelta      = "text-delta"
	ChunkReasoningDelta = "reasoning-delta"
	ChunkToolCallDelta  = "tool-call-delta"
	ChunkBlockEnd       = "block-end"
	ChunkUsage          = "usage"
	ChunkFinish         = "finish"
)

// Finish reason kinds.
const (
	FinishStop      = "stop"
	FinishToolCalls = "tool-calls"
	FinishMaxTokens = "max-tokens"
	FinishError     = "error"
	FinishAbort     = "abort"
)

// Chunk is one streamed piece of an assistant message. Type selects the fields:
//
//	block-start:     Index, BlockType
//	text-delta:      Index, Text
//	reasoning-delta: Index, Text
//	tool-call-delta: Index, ID, Name, ArgumentsDelta
//	block-end:       Index, Block (the completed block)
//	usage:           Usage
//	finish:          Reason
type Chunk struct {
	Type           string        `json:"type"`
	Index          *int          `json:"index,omitempty"`
	BlockType      string        `json:"blockType,omitempty"`
	Text           string        `json:"text,omitempty"`
	ID             string        `json:"id,omitempty"`
	Name           string        `json:"name,omitempty"`
	ArgumentsDelta *string       `json:"argumentsDelta,omitempty"`
	Block          *Block        `json:"block,omitempty"`
	Usage          *Usage        `json:"usage,omitempty"`
	Reason         *FinishReason `json:"reason,omitempty"`
}

// FinishReason ends a stream.
type FinishReason struct {
	Kind string `json:"kind"`
}

// Stream is a pull-based stream of chunks. Recv returns io.EOF after the last chunk (which is a
// finish chunk on a healthy stream). The receiver closes the stream; Close is idempotent and
// safe to call at any time. Recv returns ctx.Err() (wrapped as an *Error with code TIMEOUT or
// the context error) promptly once the request context is cancelled.
type Stream interface {
	Recv() (Chunk, error)
	Close() error
}

// Provider starts model calls. Implementations are safe for concurrent use.
type Provider interface {
	Stream(ctx context.Context, req Request) (Stream, error)
}

// LLM error codes (SPEC.md section (c)).
const (
	CodeNoAdapter             = "NO_ADAPTER"
	CodeContextWindowExceeded = "CONTEXT_WINDOW_EXCEEDED"
	CodeQuota                 = "QUOTA"
	CodeRateLimit             = "RATE_LIMIT"
	CodeEmptyResponse         = "EMPTY_RESPONSE"
	CodeInvalidCredential     = "INVALID_CREDENTIAL"
	CodeTransport             = "TRANSPORT"
	CodeServer                = "SERVER"
	CodeTimeout               = "TIMEOUT"
)

// Error is a provider or model failure. Code is one of the LLM error codes; Status is the HTTP
// status when one was received; Retryable says whether a retry could succeed.
type Error struct {
	Code      string
	Message   string
	Status    int
	Retryable bool
	Err       error
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("%s (%d): %s", e.Code, e.Status, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// ErrorCode returns the LLM error code of err, or "" when err is not an *Error.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Sleep waits for d or until ctx is done, whichever comes first, and returns ctx.Err() in the
// second case. A d <= 0 returns at once. Providers use it for latency and backoff.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
