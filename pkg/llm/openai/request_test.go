package openai_test

import (
	"encoding/json"
	"testing"

	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/llm/openai"
)

func assistant(id string, blocks ...llm.Block) llm.Message {
	return llm.Message{ID: id, Role: llm.RoleAssistant, Content: blocks,
		Source: llm.Source{Kind: llm.SourceModel, Provider: "openai", Model: "deepseek-chat"}}
}

func reasoning(text string) llm.Block { return llm.Block{Type: llm.BlockReasoning, Text: text} }

// TestWireRequest sends a two-turn history through the client and reads back what mockllm
// received: system prompt, tools, stream options, tool messages, and reasoning_content sent
// only on the assistant messages of a turn that called tools.
func TestWireRequest(t *testing.T) {
	t.Parallel()
	ms, base := startMock(t, mockllm.Config{})
	req := userRequest("tools:1")
	req.Config.MaxTokens = 512
	req.Messages = append(req.Messages,
		assistant("m2", reasoning("call echo"), llm.ToolCallBlock("call_1_1", "echo", `{"text":"a"}`)),
		llm.NewToolResultMessage("m3", "call_1_1", []llm.Block{llm.TextBlock("a"), llm.TextBlock("b")}, false),
		assistant("m4", llm.TextBlock("Done after 1 steps and 1 tool results.")),
		llm.NewUserMessage("m5", "text"),
		assistant("m6", reasoning("just answer"), llm.TextBlock("Done after 0 steps and 0 tool results.")),
		llm.NewUserMessage("m7", "say:bye"),
	)
	res, err := call(t, newClient(base, &recordSleep{}, nil), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Blocks[0].Text != "bye" {
		t.Fatalf("answer %s", jsonOf(t, res.Blocks))
	}
	var got openai.ChatRequest
	if err := json.Unmarshal(ms.Requests()[0], &got); err != nil {
		t.Fatal(err)
	}
	if got.Model != "mock-model" || !got.Stream || got.StreamOptions == nil || !got.StreamOptions.IncludeUsage || got.MaxTokens != 512 {
		t.Fatalf("request options %+v", got)
	}
	if len(got.Tools) != 1 || got.Tools[0].Type != "function" || got.Tools[0].Function.Name != "echo" || len(got.Tools[0].Function.Parameters) == 0 {
		t.Fatalf("tools %+v", got.Tools)
	}
	str := func(s string) *string { return &s }
	empty := ""
	want := []openai.ChatMessage{
		{Role: "system", Content: openai.Content{Text: "You are a test."}},
		{Role: "user", Content: openai.Content{Text: "tools:1"}},
		{Role: "assistant", Content: openai.Content{Null: true}, ReasoningContent: str("call echo"),
			ToolCalls: []openai.ToolCall{{ID: "call_1_1", Type: "function", Function: openai.FunctionCall{Name: "echo", Arguments: `{"text":"a"}`}}}},
		{Role: "tool", ToolCallID: "call_1_1", Content: openai.Content{Text: "a\nb"}},
		{Role: "assistant", Content: openai.Content{Text: "Done after 1 steps and 1 tool results."}, ReasoningContent: &empty},
		{Role: "user", Content: openai.Content{Text: "text"}},
		{Role: "assistant", Content: openai.Content{Text: "Done after 0 steps and 0 tool results."}},
		{Role: "user", Content: openai.Content{Text: "say:bye"}},
	}
	if jsonOf(t, got.Messages) != jsonOf(t, want) {
		t.Fatalf("messages\n got %s\nwant %s", jsonOf(t, got.Messages), jsonOf(t, want))
	}
}

func TestWireMessagesImagesAndPlainTurns(t *testing.T) {
	t.Parallel()
	msgs := []llm.Message{
		{ID: "u", Role: llm.RoleUser, Source: llm.Source{Kind: llm.SourceUser},
			Content: []llm.Block{llm.TextBlock("look"), {Type: llm.BlockImage, MediaType: "image/png", Data: "AAAA"}}},
		assistant("a", llm.TextBlock("a cat")),
	}
	got := openai.WireMessages("", msgs)
	want := `[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]},{"role":"assistant","content":"a cat"}]`
	if jsonOf(t, got) != want {
		t.Fatalf("got %s\nwant %s", jsonOf(t, got), want)
	}
}

// BenchmarkStream20ToolCalls measures one streamed response carrying 20 tool calls, end to
// end: request encoding, HTTP to mockllm, SSE parsing and assembly.
func BenchmarkStream20ToolCalls(b *testing.B) {
	_, base := startMock(b, mockllm.Config{})
	c := newClient(base, &recordSleep{}, nil)
	req := userRequest("tools:20")
	b.ReportAllocs()
	for b.Loop() {
		s, err := c.Stream(b.Context(), req)
		if err != nil {
			b.Fatal(err)
		}
		res, err := llm.ReadAll(s)
		s.Close()
		if err != nil || len(res.Blocks) != 20 {
			b.Fatalf("%d blocks, err %v", len(res.Blocks), err)
		}
	}
}
