package agentloop

import (
	"context"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
)

// TestBatchesPerTurn pins how many appends (durable commits with a store) a turn costs when the
// model answers within one coalescing window: the claim with step/start and the entered message,
// one batch before every exclusive call's body, and the turn's end; launches of concurrency-safe
// calls ride the next batch. Every extra batch is a WAL flush per turn.
func TestBatchesPerTurn(t *testing.T) {
	t.Parallel()
	for script, want := range map[string]int{
		"text":                            2, // claim + step/start + user/message; the rest with turn/end
		"tool:echo args:{\"text\":\"x\"}": 2, // claim; the rest (a parallel-safe launch rides)
		"tools:16 tool:echo":              2, // claim; the rest (the parallel launch rides)
		"tool:sleep args:{}":              4, // claim; tool/call; the exclusive result; the rest
		"tools:1 steps:3":                 2, // claim; the rest
	} {
		t.Run(strings.ReplaceAll(script, " ", "_"), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil)
			var batches [][]string
			h.j.OnAppend = func(evs []eventlog.Event) {
				var types []string
				for _, ev := range evs {
					types = append(types, ev.Type)
				}
				batches = append(batches, types)
			}
			h.post(eventlog.InboxNextTurn, script)
			batches = nil
			if r := h.serve(context.Background()); len(r) != 1 || r[0].Kind != eventlog.EndCompleted {
				t.Fatalf("reasons %+v", r)
			}
			if len(batches) != want {
				t.Errorf("%d batches, want %d:", len(batches), want)
				for _, b := range batches {
					t.Logf("  %v", b)
				}
			}
		})
	}
}
