package agentloop

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

// logAtCall records the committed log each time the model is called: what a replica killed
// while it waits for the model's first byte leaves behind.
type logAtCall struct {
	p  llm.Provider
	j  *eventlog.MemJournal
	at [][]eventlog.Event
}

func (p *logAtCall) Stream(ctx context.Context, req llm.Request) (llm.Stream, error) {
	p.at = append(p.at, p.j.Events())
	return p.p.Stream(ctx, req)
}

// TestSES14_NoMessageLostWhileTheModelIsCalled: whenever the model is called, the committed log
// holds the message exactly once, either entered as a user/message of the open turn or still
// waiting in the inbox (the turn's first claim rides the turn's first batch): a replica dying
// during the call leaves a log that crash repair closes with nothing lost and, once repaired and
// served again, the message served once.
func TestSES14_NoMessageLostWhileTheModelIsCalled(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	lp := &logAtCall{p: h.cfg.Provider, j: h.j}
	h.cfg.Provider = lp
	msg := h.post(eventlog.InboxNextTurn, "tool:echo")
	h.serve(context.Background())
	if len(lp.at) != 2 {
		t.Fatalf("%d model calls, want 2", len(lp.at))
	}
	for i, evs := range lp.at {
		repaired := append(evs, eventlog.Closers(evs)...)
		if err := eventlog.CheckInvariants(repaired); err != nil {
			t.Fatalf("call %d: repaired log: %v", i, err)
		}
		entered := 0
		var inbox eventlog.Inbox
		for _, ev := range repaired {
			var m struct{ ID string }
			if ev.Type == eventlog.TypeUserMessage && json.Unmarshal(ev.Data, &m) == nil && m.ID == msg.ID {
				entered++
			}
			if ev.Type == eventlog.TypeInboxSpliced {
				if err := inbox.ApplyEvent(ev); err != nil {
					t.Fatal(err)
				}
			}
		}
		if inbox.Has(msg.ID) {
			entered++
		}
		if entered != 1 {
			types := make([]string, len(evs))
			for k, ev := range evs {
				types[k] = ev.Type
			}
			t.Fatalf("model call %d: the committed log %v holds the message %d times (entered or waiting), want 1", i+1, types, entered)
		}
	}
}
