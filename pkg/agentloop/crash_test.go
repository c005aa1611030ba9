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

// TestSES14_ClaimedMessageDurableBeforeModelCall: a message claimed from the inbox is entered as
// a committed user/message before the model call starts, so a replica dying during the call
// leaves a log that crash repair closes with the message served once, not a claim that removed
// the message from the inbox without entering it (a lost message).
func TestSES14_ClaimedMessageDurableBeforeModelCall(t *testing.T) {
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
		for _, ev := range repaired {
			var m struct{ ID string }
			if ev.Type == eventlog.TypeUserMessage && json.Unmarshal(ev.Data, &m) == nil && m.ID == msg.ID {
				entered++
			}
		}
		if entered != 1 {
			types := make([]string, len(evs))
			for k, ev := range evs {
				types[k] = ev.Type
			}
			t.Fatalf("model call %d: the committed log %v enters the claimed message %d times, want 1", i+1, types, entered)
		}
	}
}
