package agentloop

import (
	"context"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

func TestLOOP2_TextTurn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.post(eventlog.InboxNextTurn, "text")
	reasons := h.serve(context.Background())
	if len(reasons) != 1 || reasons[0].Kind != eventlog.EndCompleted {
		t.Fatalf("reasons = %+v", reasons)
	}
	want := []string{"agent/inbox/spliced", "turn/start", "agent/inbox/spliced", "step/start",
		"user/message", "request/header", "request/context", "assistant/chunk", "assistant/message",
		"step/end", "turn/end"}
	if got := h.types(); !subsequence(got, want) {
		t.Fatalf("log %v lacks %v", got, want)
	}
	h.checkInvariants()
	am := decode[eventlog.AssistantMessage](t, h.ofType(eventlog.TypeAssistantMessage)[0].Data)
	if !strings.HasPrefix(am.Message.Text(), "Done after 0 steps") {
		t.Fatalf("answer %q", am.Message.Text())
	}
}

func TestScenario26_RoundTripInProcess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.post(eventlog.InboxNextTurn, "tools:4")
	h.serve(context.Background())
	h.checkInvariants()
	results := h.ofType(eventlog.TypeToolResult)
	if len(results) != 4 {
		t.Fatalf("%d tool results; log %v", len(results), h.types())
	}
	calls := h.ofType(eventlog.TypeToolCall)
	for i, r := range results {
		d := decode[eventlog.ToolResult](t, r.Data)
		c := decode[eventlog.ToolCall](t, calls[i].Data)
		if d.Message.Content[0].ToolCallID != c.CallID || r.SourceEventSeqs[0] != calls[i].Seq {
			t.Fatalf("result %d cites %v for call %s at %d", i, r.SourceEventSeqs, c.CallID, calls[i].Seq)
		}
		if d.Message.Content[0].IsError || d.Message.Content[0].Content[0].Text == "" {
			t.Fatalf("result %d: %+v", i, d.Message)
		}
	}
	msgs := h.ofType(eventlog.TypeAssistantMessage)
	last := decode[eventlog.AssistantMessage](t, msgs[len(msgs)-1].Data)
	if !strings.Contains(last.Message.Text(), "4 tool results") {
		t.Fatalf("final answer %q", last.Message.Text())
	}
}

func TestLOOP4_ChunksCoalescedAndCited(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.post(eventlog.InboxNextTurn, "say:one%20two%20three%20four%20five%20six")
	h.serve(context.Background())
	chunks := h.ofType(eventlog.TypeAssistantChunk)
	am := h.ofType(eventlog.TypeAssistantMessage)[0]
	if len(am.SourceEventSeqs) != len(chunks) {
		t.Fatalf("message cites %v, %d chunks", am.SourceEventSeqs, len(chunks))
	}
	var text string
	deltas := 0
	for _, c := range chunks {
		d := decode[eventlog.AssistantChunk](t, c.Data)
		if d.Chunk.Type == llm.ChunkTextDelta {
			deltas++
			text += d.Chunk.Text
		}
	}
	if text != "one two three four five six" || deltas != 1 {
		t.Fatalf("%d deltas with text %q; want one merged delta", deltas, text)
	}
}
