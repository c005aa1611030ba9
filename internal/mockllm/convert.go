package mockllm

import (
	"fmt"
	"strings"

	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/llm/openai"
	"github.com/dshd/dshd/pkg/llm/scripted"
)

// validatePairs rejects what real providers reject: an assistant message with tool_calls not
// followed by a tool message for each call, and a tool message that answers no call of the
// assistant message before it.
func validatePairs(msgs []openai.ChatMessage) error {
	pending := map[string]bool{}
	var order []string
	missing := func() error {
		var ids []string
		for _, id := range order {
			if pending[id] {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			return nil
		}
		return fmt.Errorf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", strings.Join(ids, ", "))
	}
	for i, m := range msgs {
		if m.Role == "tool" {
			if !pending[m.ToolCallID] {
				return fmt.Errorf("Messages with role 'tool' must be a response to a preceding message with 'tool_calls' (messages[%d], tool_call_id %q)", i, m.ToolCallID)
			}
			delete(pending, m.ToolCallID)
			continue
		}
		if err := missing(); err != nil {
			return err
		}
		pending, order = map[string]bool{}, nil
		for _, tc := range m.ToolCalls {
			pending[tc.ID] = true
			order = append(order, tc.ID)
		}
	}
	return missing()
}

// llmRequest converts a wire request to the history the scripted engine reads. A user
// message counts as user-authored (source kind user) when it is a pure script; other user
// text (a runtime-context snapshot, prose) becomes a plugin message, which the engine reads
// only when no script is found.
func llmRequest(wr openai.ChatRequest) llm.Request {
	req := llm.Request{Config: llm.Config{Provider: "mockllm", Model: wr.Model}}
	for _, t := range wr.Tools {
		req.Tools = append(req.Tools, llm.ToolSchema{Name: t.Function.Name,
			Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	var system []string
	for i, m := range wr.Messages {
		id := fmt.Sprintf("m%d", i+1)
		switch m.Role {
		case "system", "developer":
			system = append(system, m.Content.Text)
		case "assistant":
			req.Messages = append(req.Messages, assistantMessage(id, wr.Model, m))
		case "tool":
			req.Messages = append(req.Messages, llm.NewToolResultMessage(id, m.ToolCallID,
				[]llm.Block{llm.TextBlock(m.Content.Text)}, false))
		default:
			msg := llm.NewUserMessage(id, m.Content.Text)
			if _, pure := scripted.Parse(m.Content.Text); !pure {
				msg.Source = llm.Source{Kind: llm.SourcePlugin, Plugin: "wire"}
			}
			req.Messages = append(req.Messages, msg)
		}
	}
	req.System = strings.Join(system, "\n")
	return req
}

func assistantMessage(id, model string, m openai.ChatMessage) llm.Message {
	msg := llm.Message{ID: id, Role: llm.RoleAssistant, Content: []llm.Block{},
		Source: llm.Source{Kind: llm.SourceModel, Provider: "mockllm", Model: model}}
	if m.ReasoningContent != nil && *m.ReasoningContent != "" {
		msg.Content = append(msg.Content, llm.Block{Type: llm.BlockReasoning, Text: *m.ReasoningContent})
	}
	if m.Content.Text != "" {
		msg.Content = append(msg.Content, llm.TextBlock(m.Content.Text))
	}
	for _, tc := range m.ToolCalls {
		msg.Content = append(msg.Content, llm.ToolCallBlock(tc.ID, tc.Function.Name, tc.Function.Arguments))
	}
	return msg
}
