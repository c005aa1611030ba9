package agentloop

import (
	"context"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
)

// TestBatchesPerTurn pins how many appends (durable commits with a store) a turn costs when the
// model answers within one coalescing window: the turn's first claim is committed before the
// model is called (docs/rules.md, cancel-exact), a batch is written before every exclusive call's
// body and after its result, launches of concurrency-safe calls whose results settle inside the
// window ride the next batch, and the turn's end closes it. Every extra batch is a WAL flush per
// turn.
func TestBatchesPerTurn(t *testing.T) {
	t.Parallel()
	for script, want := range map[string]int{
		"text":                            2, // turn/start and the claim; the rest
		"tool:echo args:{\"text\":\"x\"}": 2, // the claim; a parallel-safe launch rides the rest
		"tools:16 tool:echo":              2, // the claim; the parallel launch rides the rest
		"tool:sleep args:{}":              4, // the claim; up to the exclusive call's tool/call; its result; the rest
		"tools:1 steps:3":                 2, // the claim; everything else
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
