// Package llm is the leaf vocabulary shared by every other package: messages and their content
// blocks (docs/rules.md SES-6), tool schemas, model requests, the streaming chunk vocabulary, the LLM
// error codes of docs/rules.md, and the Provider/Stream seam. It imports only the standard
// library.
//
// JSON shapes are those of the event vocabulary in docs/events.md, exactly: field
// names are camelCase, block types are kebab-case ("tool-call", "tool-result").
package llm

import (
	"encoding/json"
	"fmt"
)

// Roles of a message.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Source kinds of a message (SES-6).
const (
	SourceUser   = "user"
	SourceModel  = "model"
	SourceTool   = "tool"
	SourcePlugin = "plugin"
)

// Content block types.
const (
	BlockText       = "text"
	BlockReasoning  = "reasoning"
	BlockToolCall   = "tool-call"
	BlockToolResult = "tool-result"
	BlockImage      = "image"
)

// Message is one model-visible message: a user message, an assistant message or a tool result
// message (role user, source kind tool). Messages are values; treat them as immutable once
// appended to a log.
type Message struct {
	ID      string  `json:"id"`
	Role    string  `json:"role"`
	Content []Block `json:"content"`
	Source  Source  `json:"source"`
}

// Source says where a message came from. Kind is always set; the other fields depend on it:
// model messages carry Provider and Model (and optional ReplayState), tool results carry CallID,
// plugin messages carry Plugin and optionally Form and Sections (PRM-9 snapshots).
type Source struct {
	Kind        string          `json:"kind"`
	Provider    string          `json:"provider,omitempty"`
	Model       string          `json:"model,omitempty"`
	ReplayState json.RawMessage `json:"replayState,omitempty"`
	CallID      string          `json:"callId,omitempty"`
	Plugin      string          `json:"plugin,omitempty"`
	Form        string          `json:"form,omitempty"`
	Sections    []string        `json:"sections,omitempty"`
}

// Block is one content block. Type selects which fields are meaningful:
//
//	text:        Text
//	reasoning:   Text, optional Signature (provider replay data)
//	tool-call:   ID, Name, Arguments (the raw JSON string the model produced)
//	tool-result: ToolCallID, Content (nested blocks), IsError
//	image:       MediaType, Data (base64)
//
// MarshalJSON writes only the fields of the block's type, so `isError:false` and an empty `text`
// are kept where the type requires them.
type Block struct {
	Type       string
	Text       string
	Signature  string
	ID         string
	Name       string
	Arguments  string
	ToolCallID string
	Content    []Block
	IsError    bool
	MediaType  string
	Data       string
}

// TextBlock returns a text block.
func TextBlock(s string) Block { return Block{Type: BlockText, Text: s} }

// ToolCallBlock returns a tool-call block.
func ToolCallBlock(id, name, args string) Block {
	return Block{Type: BlockToolCall, ID: id, Name: name, Arguments: args}
}

// MarshalJSON implements json.Marshaler (AppendJSON).
func (b Block) MarshalJSON() ([]byte, error) { return b.AppendJSON(nil) }

// UnmarshalJSON implements json.Unmarshaler. An unknown block type is an error.
func (b *Block) UnmarshalJSON(data []byte) error {
	var raw struct {
		Type       string  `json:"type"`
		Text       *string `json:"text"`
		Signature  string  `json:"signature"`
		ID         string  `json:"id"`
		Name       string  `json:"name"`
		Arguments  *string `json:"arguments"`
		ToolCallID string  `json:"toolCallId"`
		Content    []Block `json:"content"`
		IsError    bool    `json:"isError"`
		MediaType  string  `json:"mediaType"`
		Data       string  `json:"data"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	*b = Block{Type: raw.Type, Signature: raw.Signature, ID: raw.ID, Name: raw.Name,
		ToolCallID: raw.ToolCallID, Content: raw.Content, IsError: raw.IsError,
		MediaType: raw.MediaType, Data: raw.Data}
	if raw.Text != nil {
		b.Text = *raw.Text
	}
	if raw.Arguments != nil {
		b.Arguments = *raw.Arguments
	}
	switch raw.Type {
	case BlockText, BlockReasoning:
		if raw.Text == nil {
			return fmt.Errorf("llm: %s block without text", raw.Type)
		}
	case BlockToolCall:
		if raw.ID == "" || raw.Name == "" || raw.Arguments == nil {
			return fmt.Errorf("llm: tool-call block needs id, name and arguments")
		}
	case BlockToolResult:
		if raw.ToolCallID == "" || raw.Content == nil {
			return fmt.Errorf("llm: tool-result block needs toolCallId and content")
		}
	case BlockImage:
		if raw.MediaType == "" || raw.Data == "" {
			return fmt.Errorf("llm: image block needs mediaType and data")
		}
	default:
		return fmt.Errorf("llm: unknown content block type %q", raw.Type)
	}
	return nil
}

// ToolCalls returns the message's tool-call blocks in order.
func (m Message) ToolCalls() []Block {
	var out []Block
	for _, b := range m.Content {
		if b.Type == BlockToolCall {
			out = append(out, b)
		}
	}
	return out
}

// Text returns the concatenated text blocks of the message.
func (m Message) Text() string {
	var s string
	for _, b := range m.Content {
		if b.Type == BlockText {
			s += b.Text
		}
	}
	return s
}

// NewToolResultMessage builds the SES-7 tool result message: role user, source {kind:'tool',
// callId}, and exactly one tool-result block whose toolCallId equals callId.
func NewToolResultMessage(id, callID string, content []Block, isError bool) Message {
	if content == nil {
		content = []Block{}
	}
	return Message{
		ID:     id,
		Role:   RoleUser,
		Source: Source{Kind: SourceTool, CallID: callID},
		Content: []Block{{
			Type: BlockToolResult, ToolCallID: callID, Content: content, IsError: isError,
		}},
	}
}

// NewUserMessage builds a plain user text message.
func NewUserMessage(id, text string) Message {
	return Message{ID: id, Role: RoleUser, Source: Source{Kind: SourceUser},
		Content: []Block{TextBlock(text)}}
}

// Validate checks the SES-6 shape rules: a non-empty id, a role, a source kind and a content
// array; assistant messages come from the model with provider and model; tool results carry
// exactly one tool-result block matching their callId.
func (m Message) Validate() error {
	if m.ID == "" {
		return fmt.Errorf("message id must be a non-empty string")
	}
	if m.Role != RoleUser && m.Role != RoleAssistant {
		return fmt.Errorf("message %s: role must be user or assistant", m.ID)
	}
	if m.Source.Kind == "" {
		return fmt.Errorf("message %s: source.kind is required", m.ID)
	}
	if m.Content == nil {
		return fmt.Errorf("message %s: content must be an array", m.ID)
	}
	switch {
	case m.Role == RoleAssistant:
		if m.Source.Kind != SourceModel || m.Source.Provider == "" || m.Source.Model == "" {
			return fmt.Errorf("message %s: assistant source must be {kind:'model', provider, model}", m.ID)
		}
	case m.Source.Kind == SourceTool:
		if m.Source.CallID == "" {
			return fmt.Errorf("message %s: tool source needs callId", m.ID)
		}
		if len(m.Content) != 1 || m.Content[0].Type != BlockToolResult || m.Content[0].ToolCallID != m.Source.CallID {
			return fmt.Errorf("message %s: a tool result needs exactly one tool-result block with toolCallId %q", m.ID, m.Source.CallID)
		}
	case m.Source.Kind == SourceModel:
		return fmt.Errorf("message %s: a model source needs role assistant", m.ID)
	}
	return nil
}
