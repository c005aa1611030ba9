package openai

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"

	"github.com/dshd/dshd/pkg/llm"
)

// encodeRequest encodes wr as json.Marshal does, byte for byte (TestEncodeRequestMatchesMarshal),
// without reflection; tools is the encoding of wr.Tools (toolCache). Every step of a turn sends
// the whole history and the same tools again, so this is the request's hot path.
func encodeRequest(wr ChatRequest, tools []byte) ([]byte, error) {
	n := len(tools) + 256 // one allocation for the body, unless it escapes much
	for _, m := range wr.Messages {
		n += len(m.Content.Text) + 64
		if m.ReasoningContent != nil {
			n += len(*m.ReasoningContent) + 24
		}
		for _, tc := range m.ToolCalls {
			n += len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments)*5/4 + 64
		}
	}
	b := make([]byte, 0, n)
	b = append(b, `{"model":`...)
	b = appendString(b, wr.Model)
	b = append(b, `,"messages":`...)
	if wr.Messages == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, m := range wr.Messages {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendMessage(b, m); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	}
	if len(wr.Tools) > 0 {
		b = append(b, `,"tools":`...)
		b = append(b, tools...)
	}
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, wr.Stream)
	if wr.StreamOptions != nil {
		b = append(b, `,"stream_options":{"include_usage":`...)
		b = strconv.AppendBool(b, wr.StreamOptions.IncludeUsage)
		b = append(b, '}')
	}
	if wr.MaxTokens != 0 {
		b = append(b, `,"max_tokens":`...)
		b = strconv.AppendInt(b, int64(wr.MaxTokens), 10)
	}
	if wr.Temperature != nil {
		t, err := json.Marshal(*wr.Temperature) // the float format and its errors are encoding/json's
		if err != nil {
			return nil, err
		}
		b = append(b, `,"temperature":`...)
		b = append(b, t...)
	}
	if wr.ReasoningEffort != "" {
		b = append(b, `,"reasoning_effort":`...)
		b = appendString(b, wr.ReasoningEffort)
	}
	return append(b, '}'), nil
}

func appendMessage(b []byte, m ChatMessage) ([]byte, error) {
	b = append(b, `{"role":`...)
	b = appendString(b, m.Role)
	b = append(b, `,"content":`...)
	switch {
	case m.Content.Null:
		b = append(b, "null"...)
	case m.Content.Parts != nil:
		parts, err := json.Marshal(m.Content.Parts) // images: rare, and large
		if err != nil {
			return nil, err
		}
		b = append(b, parts...)
	default:
		b = appendString(b, m.Content.Text)
	}
	if m.ReasoningContent != nil {
		b = append(b, `,"reasoning_content":`...)
		b = appendString(b, *m.ReasoningContent)
	}
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i, tc := range m.ToolCalls {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendToolCall(b, tc)
		}
		b = append(b, ']')
	}
	if m.ToolCallID != "" {
		b = append(b, `,"tool_call_id":`...)
		b = appendString(b, m.ToolCallID)
	}
	return append(b, '}'), nil
}

func appendToolCall(b []byte, tc ToolCall) []byte {
	b = append(b, '{')
	if tc.Index != nil {
		b = append(b, `"index":`...)
		b = strconv.AppendInt(b, int64(*tc.Index), 10)
		b = append(b, ',')
	}
	if tc.ID != "" {
		b = append(b, `"id":`...)
		b = appendString(b, tc.ID)
		b = append(b, ',')
	}
	if tc.Type != "" {
		b = append(b, `"type":`...)
		b = appendString(b, tc.Type)
		b = append(b, ',')
	}
	b = append(b, `"function":{`...)
	if tc.Function.Name != "" {
		b = append(b, `"name":`...)
		b = appendString(b, tc.Function.Name)
		b = append(b, ',')
	}
	b = append(b, `"arguments":`...)
	b = appendString(b, tc.Function.Arguments)
	return append(b, "}}"...)
}

// appendString appends s as json.Marshal writes it (HTML characters escaped).
func appendString(b []byte, s string) []byte { return llm.AppendJSONString(b, s, true) }

// toolCache remembers the encodings of the last few tool lists a client sent: the sessions of
// a preset send the same tools at every step. Safe for concurrent use.
type toolCache struct {
	mu      sync.Mutex
	entries []toolEntry // most recently used first
}

type toolEntry struct {
	tools []llm.ToolSchema // a deep copy of what was encoded
	enc   []byte
}

// toolCacheSize bounds the tool lists a client remembers.
const toolCacheSize = 8

// encode returns the JSON of WireTools(tools), as json.Marshal writes it. The result is shared:
// it must not be modified.
func (c *toolCache) encode(tools []llm.ToolSchema) ([]byte, error) {
	c.mu.Lock()
	for i, e := range c.entries {
		if sameTools(e.tools, tools) {
			copy(c.entries[1:i+1], c.entries[:i])
			c.entries[0] = e
			c.mu.Unlock()
			return e.enc, nil
		}
	}
	c.mu.Unlock()
	enc, err := json.Marshal(WireTools(tools))
	if err != nil {
		return nil, err
	}
	e := toolEntry{tools: make([]llm.ToolSchema, len(tools)), enc: enc}
	for i, t := range tools {
		e.tools[i] = llm.ToolSchema{Name: t.Name, Description: t.Description, Parameters: bytes.Clone(t.Parameters)}
	}
	c.mu.Lock()
	c.entries = append([]toolEntry{e}, c.entries[:min(len(c.entries), toolCacheSize-1)]...)
	c.mu.Unlock()
	return enc, nil
}

func sameTools(a, b []llm.ToolSchema) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Description != b[i].Description || !bytes.Equal(a[i].Parameters, b[i].Parameters) {
			return false
		}
	}
	return true
}
