package eventlog_test

import (
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
)

// TestE6_ParkedTurnReadModel: a turn whose last turn/parked has no turn/resumed after it is
// parked; it can resume once every wait is answered, or when it is cancelled; crash repair
// leaves it open, and closes it again once it was resumed.
func TestE6_ParkedTurnReadModel(t *testing.T) {
	t.Parallel()
	parked := eventlog.TurnParked{Turn: 1, Step: 1, Reason: eventlog.ParkClient, Waits: []eventlog.ParkWait{
		{Kind: eventlog.ParkApproval, CallID: "c1", ToolName: "write", ApprovalID: "a1"},
		{Kind: eventlog.ParkClient, CallID: "c2", ToolName: "pick"},
	}}
	if err := parked.Validate(); err != nil {
		t.Fatalf("valid marker refused: %v", err)
	}
	log := []eventlog.Event{
		ev(0, eventlog.TypeTurnStart, eventlog.TurnStart{Turn: 1}),
		ev(1, eventlog.TypeStepStart, eventlog.StepStart{Turn: 1, Step: 1}),
		ev(2, eventlog.TypeTurnParked, parked),
	}
	p, ok := eventlog.Parked(log)
	if !ok || p.Seq != 2 || p.Resolvable() || len(p.Open()) != 2 {
		t.Fatalf("parked = %+v, %v; want parked at 2 with two open waits", p, ok)
	}
	if c := eventlog.Closers(log); c != nil {
		t.Fatalf("crash repair closes a parked turn: %+v", c)
	}
	log = append(log, ev(3, eventlog.TypeApprovalDecided, eventlog.ApprovalDecided{ID: "a1", Outcome: eventlog.ApprovalAllowedOnce}))
	if p, _ := eventlog.Parked(log); p.Resolvable() || len(p.Open()) != 1 || p.Open()[0].CallID != "c2" {
		t.Fatalf("after the answer: open %+v, want only c2", p.Open())
	}
	answered := append(log[:len(log):len(log)], ev(4, eventlog.TypeClientResult, eventlog.ClientResult{CallID: "c2", IsError: true}))
	if p, _ := eventlog.Parked(answered); !p.Resolvable() || !p.Results["c2"].IsError {
		t.Fatalf("with both answers the turn cannot resume: %+v", p)
	}
	cancelled := append(log[:len(log):len(log)], ev(4, eventlog.TypeAgentCancel, eventlog.AgentCancel{Reason: eventlog.Cause{Kind: eventlog.CauseUser}}))
	if p, _ := eventlog.Parked(cancelled); !p.Resolvable() || p.Cancel == nil {
		t.Fatalf("a cancelled parked turn cannot resume: %+v", p)
	}
	resumed := append(answered[:len(answered):len(answered)], ev(5, eventlog.TypeTurnResumed, eventlog.TurnResumed{Turn: 1, Step: 1, ParkedSeq: 2}))
	if _, ok := eventlog.Parked(resumed); ok {
		t.Fatal("a resumed turn still reads as parked")
	}
	if c := eventlog.Closers(resumed); len(c) == 0 || c[len(c)-1].Type != eventlog.TypeTurnEnd {
		t.Fatalf("crash repair does not close a resumed turn: %+v", c)
	}
	for _, bad := range []eventlog.TurnParked{
		{Turn: 1, Step: 1, Reason: "later"},
		{Turn: 1, Step: 1, Reason: eventlog.ParkApproval},
		{Turn: 1, Step: 1, Reason: eventlog.ParkHandover, Waits: parked.Waits},
		{Turn: 1, Step: 1, Reason: eventlog.ParkApproval, Waits: []eventlog.ParkWait{{Kind: eventlog.ParkApproval, CallID: "c1"}}},
	} {
		if bad.Validate() == nil {
			t.Errorf("invalid marker accepted: %+v", bad)
		}
	}
	if (eventlog.ClientResult{CallID: "c", TimedOut: true, Content: nil}).Validate() != nil ||
		(eventlog.ClientResult{}).Validate() == nil {
		t.Error("client result validation")
	}
}

// TestE6_InvariantsOfParkedTurns: the relational checker accepts a park, its answers and its
// resumption, and refuses what a parked turn cannot write, a resumption of no park, a park in
// another step and a second client result.
func TestE6_InvariantsOfParkedTurns(t *testing.T) {
	t.Parallel()
	base := []eventlog.Event{
		ev(0, eventlog.TypeTurnStart, eventlog.TurnStart{Turn: 1}),
		ev(1, eventlog.TypeStepStart, eventlog.StepStart{Turn: 1, Step: 1}),
		ev(2, eventlog.TypeToolCall, eventlog.ToolCall{Turn: 1, Step: 1, CallID: "c1", Name: "pick", Arguments: "{}"}),
		ev(3, eventlog.TypeTurnParked, eventlog.TurnParked{Turn: 1, Step: 1, Reason: eventlog.ParkClient,
			Waits: []eventlog.ParkWait{{Kind: eventlog.ParkClient, CallID: "c1", ToolName: "pick"}}}),
		ev(4, eventlog.TypeClientResult, eventlog.ClientResult{CallID: "c1"}),
	}
	with := func(evs ...eventlog.Event) []eventlog.Event { return append(base[:len(base):len(base)], evs...) }
	good := with(ev(5, eventlog.TypeTurnResumed, eventlog.TurnResumed{Turn: 1, Step: 1, ParkedSeq: 3}),
		ev(6, eventlog.TypeStepEnd, eventlog.StepEnd{Turn: 1, Step: 1}),
		ev(7, eventlog.TypeTurnEnd, eventlog.TurnEnd{Turn: 1, Reason: eventlog.TurnReason{Kind: eventlog.EndCompleted}}))
	if err := eventlog.CheckInvariants(good); err != nil {
		t.Fatalf("a parked and resumed turn refused: %v", err)
	}
	for name, bad := range map[string][]eventlog.Event{
		"step/end while parked":   with(ev(5, eventlog.TypeStepEnd, eventlog.StepEnd{Turn: 1, Step: 1})),
		"turn/end while parked":   with(ev(5, eventlog.TypeTurnEnd, eventlog.TurnEnd{Turn: 1, Reason: eventlog.TurnReason{Kind: eventlog.EndCompleted}})),
		"second client result":    with(ev(5, eventlog.TypeClientResult, eventlog.ClientResult{CallID: "c1"})),
		"resumed in another step": with(ev(5, eventlog.TypeTurnResumed, eventlog.TurnResumed{Turn: 1, Step: 2, ParkedSeq: 3})),
		"resumed twice": with(ev(5, eventlog.TypeTurnResumed, eventlog.TurnResumed{Turn: 1, Step: 1, ParkedSeq: 3}),
			ev(6, eventlog.TypeTurnResumed, eventlog.TurnResumed{Turn: 1, Step: 1, ParkedSeq: 3})),
		"park names another step": {base[0], base[1], ev(2, eventlog.TypeTurnParked, eventlog.TurnParked{Turn: 1, Step: 2,
			Reason: eventlog.ParkClient, Waits: []eventlog.ParkWait{{Kind: eventlog.ParkClient, CallID: "c1"}}})},
	} {
		if err := eventlog.CheckInvariants(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
