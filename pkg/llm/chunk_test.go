package llm_test

import (
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/dshd/dshd/pkg/llm"
)

// TestChunkShapes checks the constructors against chunk lines of the reference logs.
func TestChunkShapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		chunk llm.Chunk
		want  string
	}{
		{llm.BlockStartChunk(0, llm.BlockToolCall), `{"type":"block-start","index":0,"blockType":"tool-call"}`},
		{llm.ToolCallDeltaChunk(0, "c1", "echo", ""), `{"type":"tool-call-delta","index":0,"id":"c1","name":"echo","argumentsDelta":""}`},
		{llm.TextDeltaChunk(0, " after"), `{"type":"text-delta","index":0,"text":" after"}`},
		{llm.BlockEndChunk(0, llm.TextBlock("Done")), `{"type":"block-end","index":0,"block":{"type":"text","text":"Done"}}`},
		{llm.UsageChunk(llm.Usage{InputTokens: 21, OutputTokens: 8}), `{"type":"usage","usage":{"inputTokens":21,"outputTokens":8}}`},
		{llm.FinishChunk(llm.FinishToolCalls), `{"type":"finish","reason":{"kind":"tool-calls"}}`},
		{llm.ErrorChunk(llm.Failure{Message: "HTTP 500", Code: llm.CodeServer, Status: 500}),
			`{"type":"finish","reason":{"kind":"error","failure":{"message":"HTTP 500","code":"SERVER","status":500}}}`},
		{llm.ErrorChunk(llm.Failure{Message: "reset", Code: llm.CodeTransport}),
			`{"type":"finish","reason":{"kind":"error","failure":{"message":"reset","code":"TRANSPORT"}}}`},
	}
	for _, tt := range tests {
		got, err := json.Marshal(tt.chunk)
		if err != nil || string(got) != tt.want {
			t.Errorf("got %s (%v), want %s", got, err, tt.want)
		}
	}
}

type chunks struct {
	list []llm.Chunk
	err  error
}

func (s *chunks) Recv() (llm.Chunk, error) {
	if len(s.list) == 0 {
		return llm.Chunk{}, s.err
	}
	c := s.list[0]
	s.list = s.list[1:]
	return c, nil
}

func (s *chunks) Close() error { return nil }

func TestReadAll(t *testing.T) {
	t.Parallel()
	list := []llm.Chunk{
		llm.BlockStartChunk(0, llm.BlockText), llm.BlockStartChunk(1, llm.BlockToolCall),
		llm.BlockEndChunk(1, llm.ToolCallBlock("a", "f", "{}")), llm.BlockEndChunk(0, llm.TextBlock("t")),
		llm.UsageChunk(llm.Usage{InputTokens: 1}), llm.FinishChunk(llm.FinishToolCalls),
	}
	res, err := llm.ReadAll(&chunks{list: list, err: io.EOF})
	if err != nil || len(res.Chunks) != 6 || res.Finish != llm.FinishToolCalls || res.Usage.InputTokens != 1 ||
		len(res.Blocks) != 2 || res.Blocks[0].Text != "t" || res.Blocks[1].ID != "a" {
		t.Fatalf("%+v, %v", res, err)
	}
	boom := llm.NewError(llm.CodeTransport, "reset after %d chunks", 2)
	res, err = llm.ReadAll(&chunks{list: list[:2], err: boom})
	if !errors.Is(err, boom) || len(res.Chunks) != 2 || !boom.Retryable {
		t.Fatalf("%+v, %v", res, err)
	}
}

func TestRetryableCode(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]bool{llm.CodeRateLimit: true, llm.CodeServer: true, llm.CodeTransport: true,
		llm.CodeTimeout: true, llm.CodeQuota: false, llm.CodeInvalidCredential: false, llm.CodeEmptyResponse: false,
		llm.CodeContextWindowExceeded: false, llm.CodeNoAdapter: false} {
		if llm.RetryableCode(code) != want || llm.NewError(code, "x").Retryable != want {
			t.Errorf("%s: want retryable %v", code, want)
		}
	}
}

// TestDefaultsApply: a provider's defaults fill only what the configuration leaves unset, and
// the markers name exactly the fields they filled.
func TestDefaultsApply(t *testing.T) {
	t.Parallel()
	d := llm.Defaults{MaxTokens: 256000, ReasoningEffort: "off", ContextWindow: 1000000}
	tests := []struct {
		in        llm.Config
		want      string
		wantMarks string
	}{
		{llm.Config{Provider: "p", Model: "m"}, `{"provider":"p","model":"m","maxTokens":256000,"reasoningEffort":"off"}`,
			`{"maxTokens":true,"reasoningEffort":true}`},
		{llm.Config{Provider: "p", Model: "m", MaxTokens: 10}, `{"provider":"p","model":"m","maxTokens":10,"reasoningEffort":"off"}`,
			`{"reasoningEffort":true}`},
		{llm.Config{Provider: "p", Model: "m", MaxTokens: 10, ReasoningEffort: "high"},
			`{"provider":"p","model":"m","maxTokens":10,"reasoningEffort":"high"}`, `null`},
	}
	for _, tt := range tests {
		got, marks := d.Apply(tt.in)
		gb, _ := json.Marshal(got)
		mb, _ := json.Marshal(marks)
		if string(gb) != tt.want || string(mb) != tt.wantMarks {
			t.Errorf("Apply(%+v) = %s %s, want %s %s", tt.in, gb, mb, tt.want, tt.wantMarks)
		}
	}
	if got, marks := (llm.Defaults{}).Apply(llm.Config{Provider: "p", Model: "m"}); got.MaxTokens != 0 || got.ReasoningEffort != "" || marks != nil {
		t.Errorf("no defaults: %+v %v", got, marks)
	}
}
