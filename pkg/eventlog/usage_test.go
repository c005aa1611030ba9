package eventlog_test

import (
	"slices"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
)

// TestUsageByTurn: each usage kind adds what eventlog.Usage says, to the turn it names, with
// every kind decoded in its own shape (llm/retry's message is a string, tool/result's an object).
func TestUsageByTurn(t *testing.T) {
	ev := func(seq int64, typ, data string) eventlog.Event {
		return eventlog.Event{Seq: seq, Time: 1000 + seq, Type: typ, Data: []byte(data)}
	}
	evs := []eventlog.Event{
		ev(0, "turn/start", `{"turn":1}`),
		ev(1, "step/start", `{"turn":1,"step":1}`),
		ev(2, "llm/retry", `{"turn":1,"step":1,"attempt":1,"delayMs":5,"code":"SERVER","message":"boom"}`),
		ev(3, "assistant/chunk", `{"turn":1,"step":1,"chunk":{"type":"text-delta","text":"x"}}`),
		ev(4, "assistant/message", `{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[]},
			"usage":{"inputTokens":10,"outputTokens":3,"cacheReadTokens":4,"cacheMissTokens":6,"reasoningTokens":1,"estimated":true}}`),
		ev(5, "tool/call", `{"turn":1,"step":1,"callId":"c","name":"echo","arguments":"{}"}`),
		ev(6, "tool/result", `{"turn":1,"step":1,"message":{"content":[{"type":"tool-result","isError":true}]}}`),
		ev(7, "tool/result", `{"turn":1,"step":1,"message":{"content":[]},"error":{"name":"E","code":"X"}}`),
		ev(8, "tool/result", `{"turn":1,"step":1,"message":{"content":[{"type":"tool-result"}]}}`),
		ev(9, "turn/end", `{"turn":1,"reason":{"kind":"error","error":{"message":"m","code":"SERVER"}}}`),
		ev(10, "turn/start", `{"turn":2}`),
		ev(11, "approval/asked", `{"id":"ap","toolName":"bash"}`),
		ev(12, "turn/end", `{"turn":2,"reason":{"kind":"error","error":{"message":"m","code":"MAX_STEPS"}}}`),
	}
	got := eventlog.UsageByTurn(evs)
	want := []eventlog.TurnUsage{
		{Turn: 1, StartMs: 1000, EndMs: 1009, EndKind: "error", Usage: eventlog.Usage{InputTokens: 10, OutputTokens: 3,
			CacheReadTokens: 4, CacheMissTokens: 6, ReasoningTokens: 1, ModelCalls: 2, ToolCalls: 1, ToolErrors: 2, ModelErrors: 2}},
		{Turn: 2, StartMs: 1010, EndMs: 1012, EndKind: "error"},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("usage by turn\n got %+v\nwant %+v", got, want)
	}
	if got[0].Usage.Tokens() != 13 {
		t.Fatalf("tokens %d", got[0].Usage.Tokens())
	}
}

// TestInterruptedCallIsBilledFromItsUsageEvent: an interrupted assistant/message carries no
// usage, as in the reference (issue 18: dshd wrote its estimate into the message); the
// ignorable assistant/usage after it is counted instead, so a cancel does not make the call free.
func TestInterruptedCallIsBilledFromItsUsageEvent(t *testing.T) {
	t.Parallel()
	evs := []eventlog.Event{
		{Seq: 0, Time: 1, Type: "turn/start", Data: []byte(`{"turn":1}`)},
		{Seq: 1, Time: 1, Type: "step/start", Data: []byte(`{"turn":1,"step":1}`)},
		{Seq: 2, Time: 1, Type: "assistant/message", Data: []byte(`{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[]},"interrupted":true}`)},
		{Seq: 3, Time: 1, Type: "assistant/usage", Ignorable: true, Data: []byte(`{"turn":1,"step":1,"usage":{"inputTokens":40,"outputTokens":4,"estimated":true}}`)},
	}
	got := eventlog.UsageByTurn(evs)
	if len(got) != 1 || got[0].Usage != (eventlog.Usage{InputTokens: 40, OutputTokens: 4, ModelCalls: 1}) {
		t.Fatalf("usage %+v", got)
	}
	if !slices.Contains(eventlog.UsageKinds(), "assistant/usage") {
		t.Fatal("UsageKinds leaves out assistant/usage: a filtered read would miss the estimate")
	}
}
