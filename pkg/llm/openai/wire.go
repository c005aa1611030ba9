package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// The OpenAI chat-completions wire protocol, as far as dshd uses it. The mock server
// (internal/mockllm) decodes requests and encodes responses with the same types.

// ChatRequest is the body of POST /chat/completions.
type ChatRequest struct {
	Model           string         `json:"model"`
	Messages        []ChatMessage  `json:"messages"`
	Tools           []Tool         `json:"tools,omitempty"`
	Stream          bool           `json:"stream"`
	StreamOptions   *StreamOptions `json:"stream_options,omitempty"`
	MaxTokens       int            `json:"max_tokens,omitempty"`
	Temperature     *float64       `json:"temperature,omitempty"`
	ReasoningEffort string         `json:"reasoning_effort,omitempty"`
}

// StreamOptions asks for a usage report at the end of a stream.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Tool is one function the model may call.
type Tool struct {
	Type     string   `json:"type"`
	Function Function `json:"function"`
}

// Function describes a callable function: name, description, JSON Schema parameters.
type Function struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// ChatMessage is one message of a request: system, user, assistant or tool.
// ReasoningContent is DeepSeek's chain of thought, sent back only where DeepSeek requires it.
type ChatMessage struct {
	Role             string     `json:"role"`
	Content          Content    `json:"content"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID       string     `json:"tool_call_id,omitempty"`
}

// Content is a message's content: null, a string, or an array of parts. It marshals as null
// when Null is set, as an array when Parts is non-nil and as a string otherwise. Unmarshalling
// accepts all three; for arrays Text holds the concatenated text parts.
type Content struct {
	Text  string
	Parts []ContentPart
	Null  bool
}

// ContentPart is one part of an array content: {type:"text", text} or
// {type:"image_url", image_url:{url}}.
type ContentPart struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	ImageURL *ImageURL `json:"image_url,omitempty"`
}

// ImageURL holds an image as a URL, usually a data: URL.
type ImageURL struct {
	URL string `json:"url"`
}

// MarshalJSON implements json.Marshaler.
func (c Content) MarshalJSON() ([]byte, error) {
	switch {
	case c.Null:
		return []byte("null"), nil
	case c.Parts != nil:
		return json.Marshal(c.Parts)
	default:
		return json.Marshal(c.Text)
	}
}

// UnmarshalJSON implements json.Unmarshaler.
func (c *Content) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	*c = Content{}
	switch {
	case bytes.Equal(data, []byte("null")):
		c.Null = true
		return nil
	case len(data) > 0 && data[0] == '"':
		return json.Unmarshal(data, &c.Text)
	case len(data) > 0 && data[0] == '[':
		if err := json.Unmarshal(data, &c.Parts); err != nil {
			return err
		}
		for _, p := range c.Parts {
			if p.Type == "text" {
				c.Text += p.Text
			}
		}
		return nil
	}
	return fmt.Errorf("content must be a string, an array or null")
}

// ToolCall is a tool call in an assistant message or, with Index, a streamed delta of one.
type ToolCall struct {
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its JSON arguments (a fragment in a delta).
type FunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// ChatChunk is one streamed `data:` payload (object chat.completion.chunk). Some providers
// send an Error object instead of choices.
type ChatChunk struct {
	ID      string        `json:"id,omitempty"`
	Object  string        `json:"object,omitempty"`
	Created int64         `json:"created,omitempty"`
	Model   string        `json:"model,omitempty"`
	Choices []ChunkChoice `json:"choices"`
	Usage   *Usage        `json:"usage,omitempty"`
	Error   *APIError     `json:"error,omitempty"`
}

// ChunkChoice is one choice of a chunk. FinishReason is null until the last chunk.
type ChunkChoice struct {
	Index        int     `json:"index"`
	Delta        Delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

// Delta is the incremental assistant message of a chunk; the non-streamed response uses the
// same shape for its complete message.
type Delta struct {
	Role             string     `json:"role,omitempty"`
	Content          *string    `json:"content,omitempty"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
}

// ChatCompletion is a non-streamed response (object chat.completion).
type ChatCompletion struct {
	ID      string             `json:"id,omitempty"`
	Object  string             `json:"object,omitempty"`
	Created int64              `json:"created,omitempty"`
	Model   string             `json:"model,omitempty"`
	Choices []CompletionChoice `json:"choices"`
	Usage   *Usage             `json:"usage,omitempty"`
	Error   *APIError          `json:"error,omitempty"`
}

// CompletionChoice is one choice of a non-streamed response.
type CompletionChoice struct {
	Index        int    `json:"index"`
	Message      Delta  `json:"message"`
	FinishReason string `json:"finish_reason"`
}

// Usage is the wire token usage. DeepSeek reports cache hits as prompt_cache_hit_tokens,
// OpenAI as prompt_tokens_details.cached_tokens.
type Usage struct {
	PromptTokens            int                      `json:"prompt_tokens"`
	CompletionTokens        int                      `json:"completion_tokens"`
	TotalTokens             int                      `json:"total_tokens"`
	PromptCacheHitTokens    *int                     `json:"prompt_cache_hit_tokens,omitempty"`
	PromptCacheMissTokens   *int                     `json:"prompt_cache_miss_tokens,omitempty"`
	PromptTokensDetails     *PromptTokensDetails     `json:"prompt_tokens_details,omitempty"`
	CompletionTokensDetails *CompletionTokensDetails `json:"completion_tokens_details,omitempty"`
}

// PromptTokensDetails is OpenAI's breakdown of prompt tokens.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// CompletionTokensDetails is OpenAI's breakdown of completion tokens.
type CompletionTokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// APIError is the error object of an error response body {"error": {...}}.
type APIError struct {
	Message string          `json:"message"`
	Type    string          `json:"type,omitempty"`
	Param   json.RawMessage `json:"param,omitempty"`
	Code    json.RawMessage `json:"code,omitempty"`
}

// ErrorBody is an error response body.
type ErrorBody struct {
	Error APIError `json:"error"`
}
