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

// Config is the model configuration of a request. Provider names the adapter ("deepseek",
// "openai", "scripted"); Model the model id; BaseURL the endpoint for OpenAI-compatible
// providers. MaxTokens 0 and an empty ReasoningEffort leave the field out of the request.
type Config struct {
	Provider        string   `json:"provider"`
	Model           string   `json:"model"`
	BaseURL         string   `json:"baseUrl,omitempty"`
	MaxTokens       int      `json:"maxTokens,omitempty"`
	Temperature     *float64 `json:"temperature,omitempty"`
	ReasoningEffort string   `json:"reasoningEffort,omitempty"`
}

// Defaults are what a provider uses for the settings a preset leaves unset, declared by the
// provider so that the request header can record the effective values (SES-13
// adapterDefaults) and request/context the context window. A zero field means the provider
// declares no default: the setting is left out of the request and of the header.
type Defaults struct {
	MaxTokens       int    // output token cap sent as max_tokens
	ReasoningEffort string // reasoning effort; "off" disables reasoning
	ContextWindow   int    // the model's context window in tokens (request/context)
}

// Apply returns c with the unset MaxTokens and ReasoningEffort taken from d, and the markers of
// the fields it took (the header's adapterDefaults: "maxTokens", "reasoningEffort"); nil when
// it took none.
func (d Defaults) Apply(c Config) (Config, map[string]bool) {
	var marks map[string]bool
	mark := func(field string) {
		if marks == nil {
			marks = map[string]bool{}
		}
		marks[field] = true
	}
	if c.MaxTokens == 0 && d.MaxTokens > 0 {
		c.MaxTokens = d.MaxTokens
		mark("maxTokens")
	}
	if c.ReasoningEffort == "" && d.ReasoningEffort != "" {
		c.ReasoningEffort = d.ReasoningEffort
		mark("reasoningEffort")
	}
	return c, marks
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

// Usage counts tokens of one model call. Estimated marks counts dshd estimated itself (EstimateUsage)
// because the provider reported none: a call interrupted before its usage chunk.
type Usage struct {
	InputTokens     int  `json:"inputTokens"`
	OutputTokens    int  `json:"outputTokens"`
	CacheReadTokens int  `json:"cacheReadTokens,omitempty"`
	CacheMissTokens int  `json:"cacheMissTokens,omitempty"`
	ReasoningTokens int  `json:"reasoningTokens,omitempty"`
	Estimated       bool `json:"estimated,omitempty"`
}

// bytesPerToken is the estimate's ratio of bytes to tokens: about four bytes of English text or
// JSON make a token for the tokenizers dshd talks to.
const bytesPerToken = 4

// EstimateUsage estimates the usage of a call of req that streamed output before it was cut off
// (a cancel): the request's bytes (system prompt, messages, tool schemas, as JSON) and the output's
// text, reasoning and tool-call arguments, a token per bytesPerToken bytes, rounded up. It is
// marked Estimated. Providers bill such calls, and a turn cancelled just before its model's last
// chunk must not cost nothing.
func EstimateUsage(req Request, output []Block) Usage {
	in := len(req.System)
	if b, err := json.Marshal(req.Messages); err == nil {
		in += len(b)
	}
	if b, err := json.Marshal(req.Tools); err == nil {
		in += len(b)
	}
	var out, reasoning int
	for _, b := range output {
		switch b.Type {
		case BlockReasoning:
			reasoning += len(b.Text)
		default:
			out += len(b.Text) + len(b.Arguments)
		}
	}
	tokens := func(n int) int { return (n + bytesPerToken - 1) / bytesPerToken }
	return Usage{InputTokens: tokens(in), OutputTokens: tokens(out + reasoning), ReasoningTokens: tokens(reasoning),
		Estimated: true}
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

// FinishReason ends a stream. Failure is set for the kinds error and abort.
type FinishReason struct {
	Kind    string   `json:"kind"`
	Failure *Failure `json:"failure,omitempty"`
}

// Failure is the serializable form of a failed model call, as the failure of a finish chunk
// records it: the message, the LLM error code and the HTTP status when one was received.
type Failure struct {
	Message string `json:"message"`
	Code    string `json:"code"`
	Status  int    `json:"status,omitempty"`
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

// LLM error codes (docs/rules.md).
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
// status when one was received; Retryable says whether a retry could succeed; RetryAfter is the
// delay the provider asked for before a retry (its Retry-After header), 0 when it named none.
type Error struct {
	Code       string
	Message    string
	Status     int
	Retryable  bool
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("%s (%d): %s", e.Code, e.Status, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Failure returns the serializable facts of e.
func (e *Error) Failure() Failure {
	return Failure{Message: e.Message, Code: e.Code, Status: e.Status}
}

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
