package eventlog_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

// TestTurnOutcomeRule: the one outcome rule, for every end reason of LOOP-8.
func TestTurnOutcomeRule(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		reason eventlog.TurnReason
		want   eventlog.Outcome
		failed bool
	}{
		{eventlog.TurnReason{Kind: eventlog.EndCompleted}, eventlog.OutcomeCompleted, false},
		{eventlog.TurnReason{Kind: eventlog.EndAborted, Reason: &eventlog.Cause{Kind: eventlog.CauseUser}}, eventlog.OutcomeCancelled, false},
		{eventlog.TurnReason{Kind: eventlog.EndAborted, Reason: &eventlog.Cause{Kind: eventlog.CauseDisposed}}, eventlog.OutcomeAborted, false},
		{eventlog.TurnReason{Kind: eventlog.EndAborted}, eventlog.OutcomeAborted, false},
		{eventlog.TurnReason{Kind: eventlog.EndError, Error: &eventlog.TurnError{Code: "SERVER"}}, eventlog.OutcomeFailed, true},
		{eventlog.TurnReason{Kind: eventlog.EndMaxTokens}, eventlog.OutcomeMaxTokens, false},
		{eventlog.TurnReason{Kind: eventlog.EndInterrupted}, eventlog.OutcomeInterrupted, true},
		{eventlog.TurnReason{Kind: eventlog.EndBlocked}, eventlog.OutcomeBlocked, false},
	} {
		if got := eventlog.TurnOutcome(c.reason); got != c.want || got.Failed() != c.failed {
			t.Errorf("%+v: outcome %s (failed %v), want %s (failed %v)", c.reason, got, got.Failed(), c.want, c.failed)
		}
	}
}

func ev(seq int64, typ string, data any) eventlog.Event {
	b, _ := json.Marshal(data)
	return eventlog.Event{Type: typ, Seq: seq, Time: 1000 + seq, Data: b}
}

// TestFoldTurnsReadsATurn: seqs, times, steps, entered messages, pending approvals and usage of
// an ended and an open turn.
func TestFoldTurnsReadsATurn(t *testing.T) {
	t.Parallel()
	evs := []eventlog.Event{
		ev(0, eventlog.TypeInboxSpliced, eventlog.Insertion(eventlog.InboxNextTurn, 0, llm.NewUserMessage("u1", "hi"))),
		ev(1, eventlog.TypeTurnStart, eventlog.TurnStart{Turn: 1}),
		ev(2, eventlog.TypeStepStart, eventlog.StepStart{Turn: 1, Step: 1}),
		ev(3, eventlog.TypeUserMessage, llm.NewUserMessage("u1", "hi")),
		ev(4, eventlog.TypeAssistantMessage, eventlog.AssistantMessage{Turn: 1, Step: 1, Usage: &llm.Usage{InputTokens: 5, OutputTokens: 2}}),
		ev(5, eventlog.TypeTurnEnd, eventlog.TurnEnd{Turn: 1, Reason: eventlog.TurnReason{Kind: eventlog.EndCompleted}}),
		ev(6, eventlog.TypeTurnStart, eventlog.TurnStart{Turn: 2}),
		ev(7, eventlog.TypeApprovalAsked, eventlog.ApprovalAsked{ID: "a1", ToolName: "echo"}),
		ev(8, eventlog.TypeApprovalAsked, eventlog.ApprovalAsked{ID: "a2", ToolName: "echo"}),
		ev(9, eventlog.TypeApprovalDecided, eventlog.ApprovalDecided{ID: "a1", Outcome: "rejected"}),
	}
	got := eventlog.FoldTurns(evs, 9)
	if len(got) != 2 {
		t.Fatalf("%d turns", len(got))
	}
	one, two := got[0], got[1]
	if one.Open || one.FirstSeq != 1 || one.LastSeq != 5 || one.StartMs != 1001 || one.EndMs != 1005 || one.Steps != 1 ||
		one.Outcome != eventlog.OutcomeCompleted || !slices.Equal(one.MessageIDs, []string{"u1"}) ||
		one.Usage.InputTokens != 5 || one.Usage.ModelCalls != 1 || string(one.Reason) != `{"kind":"completed"}` {
		t.Fatalf("ended turn %+v", one)
	}
	if !two.Open || two.LastSeq != 9 || two.Outcome != "" || !slices.Equal(two.Pending, []string{"a2"}) {
		t.Fatalf("open turn %+v", two)
	}
	if s, ok := eventlog.SpliceSizeOf(evs[0]); !ok || s.Target != eventlog.InboxNextTurn || len(s.Inserted) != 1 || s.Inserted[0] < 10 {
		t.Fatalf("splice size %+v", s)
	}
	if _, ok := eventlog.SpliceSizeOf(evs[1]); ok {
		t.Fatal("a turn/start has a splice size")
	}
}
