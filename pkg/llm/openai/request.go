package openai

import (
	"strings"

	"github.com/dshd/dshd/pkg/llm"
)

// WireMessages converts a system prompt and a history to wire messages:
//
//   - the system prompt becomes a leading system message;
//   - user and plugin messages become user messages (a string, or parts when images are present);
//   - each tool-result block becomes a tool message with tool_call_id and its text joined;
//   - assistant messages carry their text and tool_calls, and reasoning_content as described
//     below.
//
// DeepSeek's thinking mode (api-docs.deepseek.com/guides/thinking_mode) ignores the
// reasoning_content of a user turn in which the model called no tool, and requires it, in
// every later request, on the assistant messages of a turn in which it did call tools (a 400
// otherwise). A turn here is the span from one user-authored message (source kind user) to the
// next. So reasoning_content is sent on every assistant message of a turn that has tool calls
// and reasoning (an empty string where a message had none), and dropped everywhere else, so
// that providers that know nothing of the field never see it on a plain chat.
func WireMessages(system string, msgs []llm.Message) []ChatMessage {
	out := make([]ChatMessage, 0, len(msgs)+1)
	if system != "" {
		out = append(out, ChatMessage{Role: "system", Content: Content{Text: system}})
	}
	replay := reasoningTurns(msgs)
	for i, m := range msgs {
		if m.Role == llm.RoleAssistant {
			out = append(out, assistantMessage(m, replay[i]))
			continue
		}
		out = appendUserMessage(out, m)
	}
	return out
}

// reasoningTurns marks the assistant messages whose reasoning must be sent back.
func reasoningTurns(msgs []llm.Message) []bool {
	replay := make([]bool, len(msgs))
	start := 0
	for i := 0; i <= len(msgs); i++ {
		if i < len(msgs) && (i == 0 || msgs[i].Source.Kind != llm.SourceUser) {
			continue
		}
		calls, reasoning := false, false
		for _, m := range msgs[start:i] {
			if m.Role == llm.RoleAssistant {
				calls = calls || len(m.ToolCalls()) > 0
				reasoning = reasoning || hasBlock(m, llm.BlockReasoning)
			}
		}
		for j := start; j < i; j++ {
			replay[j] = calls && reasoning && msgs[j].Role == llm.RoleAssistant
		}
		start = i
	}
	return replay
}

func hasBlock(m llm.Message, blockType string) bool {
	for _, b := range m.Content {
		if b.Type == blockType {
			return true
		}
	}
	return false
}

func assistantMessage(m llm.Message, withReasoning bool) ChatMessage {
	var text, reasoning strings.Builder
	cm := ChatMessage{Role: "assistant"}
	for _, b := range m.Content {
		switch b.Type {
		case llm.BlockText:
			text.WriteString(b.Text)
		case llm.BlockReasoning:
			reasoning.WriteString(b.Text)
		case llm.BlockToolCall:
			cm.ToolCalls = append(cm.ToolCalls, ToolCall{ID: b.ID, Type: "function",
				Function: FunctionCall{Name: b.Name, Arguments: b.Arguments}})
		}
	}
	cm.Content = Content{Text: text.String(), Null: text.Len() == 0 && len(cm.ToolCalls) > 0}
	if withReasoning {
		r := reasoning.String()
		cm.ReasoningContent = &r
	}
	return cm
}

// appendUserMessage appends the tool messages of m's tool-result blocks, then one user
// message for its remaining text and image blocks, if any.
func appendUserMessage(out []ChatMessage, m llm.Message) []ChatMessage {
	var parts []ContentPart
	images := false
	for _, b := range m.Content {
		switch b.Type {
		case llm.BlockToolResult:
			out = append(out, ChatMessage{Role: "tool", ToolCallID: b.ToolCallID,
				Content: Content{Text: joinText(b.Content)}})
		case llm.BlockText:
			parts = append(parts, ContentPart{Type: "text", Text: b.Text})
		case llm.BlockImage:
			images = true
			parts = append(parts, ContentPart{Type: "image_url",
				ImageURL: &ImageURL{URL: "data:" + b.MediaType + ";base64," + b.Data}})
		}
	}
	if len(parts) == 0 {
		return out
	}
	if images {
		return append(out, ChatMessage{Role: "user", Content: Content{Parts: parts}})
	}
	texts := make([]string, len(parts))
	for i, p := range parts {
		texts[i] = p.Text
	}
	return append(out, ChatMessage{Role: "user", Content: Content{Text: strings.Join(texts, "\n")}})
}

// joinText joins the text blocks of a tool result with newlines; an image becomes a short
// placeholder, since tool messages carry text only.
func joinText(blocks []llm.Block) string {
	var parts []string
	for _, b := range blocks {
		switch b.Type {
		case llm.BlockText:
			parts = append(parts, b.Text)
		case llm.BlockImage:
			parts = append(parts, "[image "+b.MediaType+"]")
		}
	}
	return strings.Join(parts, "\n")
}

// WireTools converts tool schemas to wire tools, keeping their order.
func WireTools(tools []llm.ToolSchema) []Tool {
	out := make([]Tool, len(tools))
	for i, t := range tools {
		params := t.Parameters
		if len(params) == 0 {
			params = []byte(`{"type":"object","properties":{}}`)
		}
		out[i] = Tool{Type: "function", Function: Function{Name: t.Name, Description: t.Description, Parameters: params}}
	}
	return out
}
