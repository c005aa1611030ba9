package eventlog_test

import (
	"encoding/json"
	"testing"

	et "github.com/dshd/dshd/pkg/eventlog/eventlogtest"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
)

// TestPreparedEventsReadAsStoredOnes: the folds that read an event prepared in this process
// from its payload (usage, splices, the derived history, View) give what they give for the same
// event read from a store, whose data is decoded: for typed payloads, for JSON data, for the
// reference logs.
func TestPreparedEventsReadAsStoredOnes(t *testing.T) {
	t.Parallel()
	typed := append([]eventlog.NewEvent{
		eventlog.Of(eventlog.Insertion(eventlog.InboxNextTurn, 0, llm.NewUserMessage("u1", "tools:16"), llm.NewUserMessage("u2", "x"))),
		eventlog.Of(eventlog.TurnStart{Turn: 1}),
		eventlog.Of(eventlog.Deletion(eventlog.InboxNextTurn, 1, "")),
		eventlog.Of(eventlog.StepStart{Turn: 1, Step: 1}),
		eventlog.SurfaceEvent(eventlog.UserMessage{Message: llm.NewUserMessage("u1", "tools:16")}),
		eventlog.Of(eventlog.LLMRetry{Turn: 1, Step: 1, Attempt: 1, Code: "SERVER"}),
	}, toolStepBatch()...)
	failed := llm.NewToolResultMessage("rf", "call_0", []llm.Block{{Type: llm.BlockText, Text: "no", IsError: true}}, true)
	typed = append(typed,
		eventlog.SurfaceEvent(eventlog.ToolResult{Turn: 1, Step: 1, Message: failed, Error: &fault.Info{Name: "x", Code: "y"}}),
		eventlog.SurfaceEvent(eventlog.AssistantMessage{Turn: 1, Step: 2, Interrupted: true,
			Message: llm.Message{ID: "a2", Role: llm.RoleAssistant, Content: []llm.Block{},
				Source: llm.Source{Kind: llm.SourceModel, Provider: "openai", Model: "mock"}}}, 0),
		eventlog.NewEvent{Type: eventlog.TypeAssistantUsage, Ignorable: true, Data: eventlog.AssistantUsage{Turn: 1, Step: 2, Usage: llm.Usage{InputTokens: 3}}},
		eventlog.Of(eventlog.Deletion(eventlog.InboxNextTurn, 1, eventlog.OutcomeCanceled)),
		eventlog.Of(eventlog.TurnEnd{Turn: 1, Reason: eventlog.TurnReason{Kind: eventlog.EndError, Error: &eventlog.TurnError{Code: "SERVER", Message: "m"}}}),
	)
	l := eventlog.NewLog(nil)
	evs, err := l.Append(typed...)
	if err != nil {
		t.Fatal(err)
	}
	comparePrepared(t, "typed", evs)
	for name, ref := range et.ReferenceLogs(t, "testdata") {
		raw := make([]eventlog.NewEvent, len(ref))
		for i, ev := range ref {
			raw[i] = eventlog.NewEvent{Type: ev.Type, Data: ev.Data, SurfaceOp: ev.SurfaceOp, SourceEventSeqs: ev.SourceEventSeqs,
				Ignorable: ev.Ignorable, Time: ev.Time}
		}
		evs, err := eventlog.NewLog(nil).Append(raw...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		comparePrepared(t, name, evs)
	}
}

// comparePrepared compares the folds of evs with those of the same events read back from JSON.
func comparePrepared(t *testing.T, name string, evs []eventlog.Event) {
	t.Helper()
	stored := make([]eventlog.Event, len(evs))
	for i, ev := range evs {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &stored[i]); err != nil {
			t.Fatal(err)
		}
	}
	same := func(what string, a, b any) {
		t.Helper()
		if ja, jb := jsonString(t, a), jsonString(t, b); ja != jb {
			t.Fatalf("%s: %s: prepared %s, stored %s", name, what, ja, jb)
		}
	}
	for i, ev := range evs {
		turn, u, ok := eventlog.EventUsage(ev)
		sturn, su, sok := eventlog.EventUsage(stored[i])
		same(ev.Type+" usage", []any{turn, u, ok}, []any{sturn, su, sok})
		n, ok := eventlog.TurnNumber(ev)
		sn, sok := eventlog.TurnNumber(stored[i])
		same(ev.Type+" turn", []any{n, ok}, []any{sn, sok})
		id, ok := eventlog.MessageID(ev)
		sid, sok := eventlog.MessageID(stored[i])
		same(ev.Type+" message id", []any{id, ok}, []any{sid, sok})
		sz, ok := eventlog.SpliceSizeOf(ev)
		ssz, sok := eventlog.SpliceSizeOf(stored[i])
		same(ev.Type+" splice size", []any{sz, ok}, []any{ssz, sok})
		switch ev.Type {
		case eventlog.TypeInboxSpliced:
			a, errA := eventlog.View[eventlog.InboxSpliced](ev)
			b, errB := eventlog.Decode[eventlog.InboxSpliced](stored[i])
			same("view", []any{a, errA}, []any{b, errB})
		case eventlog.TypeRequestHeader:
			a, errA := eventlog.View[eventlog.RequestHeader](ev)
			b, errB := eventlog.Decode[eventlog.RequestHeader](stored[i])
			same("view", []any{a, errA}, []any{b, errB})
		}
	}
	same("usage by turn", eventlog.UsageByTurn(evs), eventlog.UsageByTurn(stored))
	a, errA := eventlog.DeriveMessages(evs)
	b, errB := eventlog.DeriveMessages(stored)
	same("derived history", []any{a, errA}, []any{b, errB})
	la, errA := eventlog.InboxLens{}.After(evs)
	lb, errB := eventlog.InboxLens{}.After(stored)
	same("inbox lengths", []any{la, errA}, []any{lb, errB})
}

func jsonString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
