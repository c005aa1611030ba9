package api

import (
	"encoding/json"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

// TestTurnWatch drives the message stream's watcher through logs: the stream ends
// at the turn/end of the turn that entered the message, of a turn that claimed it and discarded
// it, at a cancel that cleared it, and never at another message's turn.
func TestTurnWatch(t *testing.T) {
	t.Parallel()
	msg := func(id string) llm.Message { return llm.NewUserMessage(id, "x") }
	ev := func(typ string, data any) eventlog.Event {
		b, err := json.Marshal(data)
		if err != nil {
			t.Fatal(err)
		}
		return eventlog.Event{Type: typ, Data: b}
	}
	insert := func(target string, at int, ids ...string) eventlog.Event {
		var ms []llm.Message
		for _, id := range ids {
			ms = append(ms, msg(id))
		}
		return ev(eventlog.TypeInboxSpliced, eventlog.Insertion(target, at, ms...))
	}
	claim := func(target string, n int) eventlog.Event {
		return ev(eventlog.TypeInboxSpliced, eventlog.Deletion(target, n, ""))
	}
	cancel := func(target string, n int) eventlog.Event {
		return ev(eventlog.TypeInboxSpliced, eventlog.Deletion(target, n, eventlog.OutcomeCanceled))
	}
	turnStart := func(n int) eventlog.Event { return ev(eventlog.TypeTurnStart, map[string]int{"turn": n}) }
	stepStart := func(n int) eventlog.Event { return ev(eventlog.TypeStepStart, map[string]int{"turn": n, "step": 1}) }
	entered := func(id string) eventlog.Event { return ev(eventlog.TypeUserMessage, msg(id)) }
	turnEnd := func(n int, kind string) eventlog.Event {
		return ev(eventlog.TypeTurnEnd, map[string]any{"turn": n, "reason": map[string]string{"kind": kind}})
	}
	const next, step = eventlog.InboxNextTurn, eventlog.InboxNextStep
	for name, c := range map[string]struct {
		inject bool
		log    []eventlog.Event
		end    int // index of the event that ends the stream, -1 for none
	}{
		"served":    {false, []eventlog.Event{insert(next, 0, "m"), turnStart(1), claim(next, 1), stepStart(1), entered("m"), turnEnd(1, "completed")}, 5},
		"discarded": {false, []eventlog.Event{insert(next, 0, "m"), turnStart(1), claim(next, 1), turnEnd(1, "error")}, 3},
		"behind another": {false, []eventlog.Event{insert(next, 1, "m"), turnStart(1), claim(next, 1), turnEnd(1, "error"),
			turnStart(2), claim(next, 1), stepStart(2), entered("m"), turnEnd(2, "completed")}, 8},
		"another discarded first": {false, []eventlog.Event{insert(next, 1, "m"), turnStart(1), claim(next, 1), turnEnd(1, "error"),
			turnStart(2), claim(next, 1), turnEnd(2, "error")}, 6},
		"steer into a running turn":  {false, []eventlog.Event{insert(step, 0, "m"), claim(step, 1), stepStart(4), entered("m"), turnEnd(4, "completed")}, 4},
		"steer before the turn ends": {false, []eventlog.Event{insert(step, 0, "m"), turnEnd(3, "completed"), turnStart(4), claim(step, 1), stepStart(4), entered("m"), turnEnd(4, "completed")}, 6},
		"cancelled":                  {false, []eventlog.Event{insert(next, 2, "m"), cancel(next, 3), turnEnd(1, "aborted")}, 1},
		"cancel of other lists":      {false, []eventlog.Event{insert(next, 0, "m"), cancel(step, 2), turnStart(1), claim(next, 1), stepStart(1), entered("m"), turnEnd(1, "completed")}, 6},
		"inserted before it":         {false, []eventlog.Event{insert(next, 0, "m"), insert(next, 0, "x"), turnStart(1), claim(next, 1), turnEnd(1, "error"), turnStart(2), claim(next, 1), stepStart(2), entered("m"), turnEnd(2, "completed")}, 9},
		"inject":                     {true, []eventlog.Event{insert(step, 0, "m"), turnStart(1)}, 0},
		"never served":               {false, []eventlog.Event{insert(next, 0, "m"), turnStart(1), stepStart(1), turnEnd(1, "completed")}, -1},
	} {
		w := &turnWatch{messageID: "m", inject: c.inject}
		end := -1
		for i, e := range c.log {
			if w.observe(e) {
				end = i
				break
			}
		}
		if end != c.end {
			t.Errorf("%s: the stream ends at event %d, want %d", name, end, c.end)
		}
	}
}
