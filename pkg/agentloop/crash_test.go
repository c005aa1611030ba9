package agentloop

import (
	"context"
	"encoding/json"
	"testing"
	"time"

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

// TestSES14_RepairKeepsTheTimeTheWorkStopped: the events crash repair appends carry the time of
// the crashed runner's last event, not the repairing replica's clock: a turn repaired an hour
// late still ends when its work stopped, so a timeline read from the log shows no hour-long
// turn.
func TestSES14_RepairKeepsTheTimeTheWorkStopped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, nil)
	h.post(eventlog.InboxNextTurn, "tool:echo")
	h.serve(ctx)
	// A replica killed once the tool's result was written, before the model's answer to it.
	full := h.j.Events()
	cut := -1
	for i, ev := range full {
		if ev.Type == eventlog.TypeToolResult {
			cut = i + 1
		}
	}
	if cut < 0 {
		t.Fatalf("no tool result in %v", h.types())
	}
	crashed := full[:cut]
	last := crashed[len(crashed)-1].Time
	later := time.UnixMilli(last).Add(time.Hour)
	clock := func() time.Time { return later }

	j := eventlog.NewMemJournal(clock)
	if _, err := j.Append(ctx, func(eventlog.Head) ([]eventlog.NewEvent, error) {
		out := make([]eventlog.NewEvent, len(crashed))
		for i, ev := range crashed {
			out[i] = eventlog.NewEvent{Type: ev.Type, Data: ev.Data, SurfaceOp: ev.SurfaceOp,
				SourceEventSeqs: ev.SourceEventSeqs, Ignorable: ev.Ignorable, Time: ev.Time}
		}
		return out, nil
	}); err != nil {
		t.Fatal(err)
	}
	cfg := h.cfg
	cfg.Clock = clock
	r := NewRunner(cfg, j)
	if err := r.Load(ctx); err != nil {
		t.Fatal(err)
	}
	repaired, err := r.Repair(ctx)
	if err != nil || !repaired {
		t.Fatalf("Repair = %v, %v; want true, nil", repaired, err)
	}
	evs := j.Events()
	if err := eventlog.CheckInvariants(evs); err != nil {
		t.Fatalf("repaired log: %v", err)
	}
	closers := evs[len(crashed):]
	if len(closers) == 0 {
		t.Fatal("repair appended nothing")
	}
	for _, ev := range closers {
		if ev.Time != last {
			t.Errorf("%s #%d at %d, want the last event's time %d (the repairing clock says %d)",
				ev.Type, ev.Seq, ev.Time, last, later.UnixMilli())
		}
	}
	if typ := closers[len(closers)-1].Type; typ != eventlog.TypeTurnEnd {
		t.Errorf("repair ends with %s, want %s", typ, eventlog.TypeTurnEnd)
	}
}
