package openai

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/dshd/dshd/pkg/llm"
)

// oddText has every character class appendString escapes.
const oddText = "a\"b\\c/\b\f\n\r\t\x00\x01\x1f\x7f <tag> & é € \u2028\u2029 😀 \xff\xfe\xed\xa0\x80 end"

func requestSample(text string) llm.Request {
	half := 0.25
	return llm.Request{
		Config: llm.Config{Model: "m", MaxTokens: 100, Temperature: &half, ReasoningEffort: "high"},
		System: "You are <helpful> & " + text,
		Messages: []llm.Message{
			llm.NewUserMessage("u1", text),
			{ID: "a1", Role: llm.RoleAssistant, Source: llm.Source{Kind: llm.SourceModel},
				Content: []llm.Block{{Type: llm.BlockReasoning, Text: "think " + text},
					llm.ToolCallBlock("c1", "echo", `{"text":"`+text+`"}`), llm.ToolCallBlock("c2", "echo", `{}`)}},
			llm.NewToolResultMessage("r1", "c1", []llm.Block{llm.TextBlock(text)}, false),
			llm.NewToolResultMessage("r2", "c2", nil, true),
			{ID: "u2", Role: llm.RoleUser, Source: llm.Source{Kind: llm.SourceUser},
				Content: []llm.Block{llm.TextBlock("look"), {Type: llm.BlockImage, MediaType: "image/png", Data: "AAAA"}}},
			{ID: "a2", Role: llm.RoleAssistant, Source: llm.Source{Kind: llm.SourceModel}, Content: []llm.Block{llm.TextBlock(text)}},
		},
		Tools: []llm.ToolSchema{
			{Name: "echo", Description: "Echo <it> & " + text, Parameters: json.RawMessage(`{ "type": "object", "properties": {"text": {"type":"string", "description": "<&>"}}}`)},
			{Name: "none"},
		},
	}
}

// TestEncodeRequestMatchesMarshal: the request body is what json.Marshal makes of the wire
// request, byte for byte, for every shape of message and option, and for tools served from the
// cache.
func TestEncodeRequestMatchesMarshal(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{{}, {NonStreaming: true, MaxTokens: 7}} {
		c := New(cfg)
		for _, req := range []llm.Request{requestSample(oddText), requestSample("plain"), {}, {Messages: []llm.Message{}},
			{Config: llm.Config{ReasoningEffort: "off"}, Messages: []llm.Message{llm.NewUserMessage("u", "x")}}} {
			for range 2 { // the second time, the tools come from the cache
				checkEncodeRequest(t, c, req)
			}
		}
	}
}

func checkEncodeRequest(t *testing.T, c *Client, req llm.Request) {
	t.Helper()
	want, err := json.Marshal(c.wireRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.encode(req)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded\n%s\nwant\n%s", got, want)
	}
}

// TestToolCacheSeesChanges: a tool list that differs in any part, or that was changed after it was
// encoded, is encoded again.
func TestToolCacheSeesChanges(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	req := requestSample("x")
	checkEncodeRequest(t, c, req)
	req.Tools[0].Parameters[bytes.LastIndexByte(req.Tools[0].Parameters, '>')] = '!' // changed in place
	checkEncodeRequest(t, c, req)
	req.Tools[1].Description = "now described"
	checkEncodeRequest(t, c, req)
	for i := range toolCacheSize + 2 {
		req.Tools[1].Name = string(rune('a' + i))
		checkEncodeRequest(t, c, req)
	}
}

func FuzzEncodeRequest(f *testing.F) {
	for _, s := range []string{oddText, "", "plain", "\u2028", "\xc3", "<>&"} {
		f.Add(s)
	}
	c := New(Config{})
	f.Fuzz(func(t *testing.T, s string) { checkEncodeRequest(t, c, requestSample(s)) })
}

// BenchmarkEncodeRequest encodes the request of the 21st step of a `steps:20` turn (a system
// prompt, five tools, 41 messages): json.Marshal of the wire request as it was, and the encoder
// with its tool cache.
func BenchmarkEncodeRequest(b *testing.B) {
	req := llm.Request{Config: llm.Config{Model: "mock"}, System: string(bytes.Repeat([]byte("You are a helpful agent. "), 80)),
		Messages: []llm.Message{llm.NewUserMessage("u", "steps:20")}}
	params := json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","description":"The text to return."}},"required":["text"],"additionalProperties":false}`)
	for i := range 5 {
		req.Tools = append(req.Tools, llm.ToolSchema{Name: string(rune('a' + i)), Description: "A tool that does something useful with its text.", Parameters: params})
	}
	for i := range 20 {
		id := string(rune('a' + i))
		req.Messages = append(req.Messages,
			llm.Message{ID: "a" + id, Role: llm.RoleAssistant, Content: []llm.Block{llm.ToolCallBlock("call_"+id, "echo", `{"text":"step 1 call 1"}`)}},
			llm.NewToolResultMessage("r"+id, "call_"+id, []llm.Block{llm.TextBlock("step 1 call 1")}, false))
	}
	c := New(Config{})
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(c.wireRequest(req)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.encode(req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
