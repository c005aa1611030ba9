package codemode

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// blockingHost accepts every binding call, but only after blocking its caller, the engine's
// goroutine, for block of wall time: the engine's thread sleeps inside JavaScript and uses no CPU.
// It settles each call with the value 1.
type blockingHost struct {
	box   *mailbox
	block time.Duration
}

func (h *blockingHost) submit(id int, _ string, _ json.RawMessage) string {
	<-time.After(h.block) // the time being measured, not a synchronisation
	h.box.put(settlement{id: id, ok: true, text: "1"})
	return ""
}

func (h *blockingHost) mailbox() *mailbox { return h.box }
func (h *blockingHost) stepped(bool)      {}
func (h *blockingHost) halt()             {}

// runBlocking runs code with a CPU budget of cpu and one tool, slow, whose call blocks the engine
// for three budgets of wall time.
func runBlocking(t *testing.T, cpu time.Duration, code string) outcome {
	t.Helper()
	cfg, err := Config{CPUTimeout: cpu, WallTimeout: time.Minute}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	js, rerr := strip(code)
	if rerr != nil {
		t.Fatal(rerr.msg)
	}
	return run(context.Background(), &cfg, js, []string{"slow"}, &blockingHost{box: newMailbox(), block: 3 * cpu}, nil)
}

// TestCPUBudgetChargesNoDescheduledTime: run_code's CPU budget was the wall time spent inside
// JavaScript (issue 17, finding 4), so a program whose thread was descheduled (other tenants'
// programs and commands on the same cores) was charged for time it did not run, and stopped.
// Here the engine's thread is held inside JavaScript, by a host call that blocks, for three times
// the budget: with the budget measured as the thread's CPU time the program is not charged for
// it and finishes.
func TestCPUBudgetChargesNoDescheduledTime(t *testing.T) {
	t.Parallel()
	out := runBlocking(t, 100*time.Millisecond, `const v = await tools.slow({}); return v + 1;`)
	if out.err != nil {
		t.Fatalf("run failed (%s): %s; the blocked time was charged to the CPU budget", out.err.kind, out.err.msg)
	}
	if string(out.result) != "2" {
		t.Fatalf("result %s, want 2", out.result)
	}
}

// TestCPUBudgetStopsABusyProgram: a program that computes is stopped when its thread has used
// the budget, with the documented error, also when it computes after a host call that blocked
// (a later call into JavaScript runs in what is left).
func TestCPUBudgetStopsABusyProgram(t *testing.T) {
	t.Parallel()
	for name, code := range map[string]string{
		"busy":                                   `for (;;) {}`,
		"busy after a block":                     `await tools.slow({}); for (;;) {}`,
		"busy in a microtask loop after a block": `await tools.slow({}); for (;;) await 0;`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out := runBlocking(t, 100*time.Millisecond, code)
			if out.err == nil || out.err.kind != KindTimeout || !strings.Contains(out.err.msg, "CPU-time limit of 100ms") {
				t.Fatalf("outcome %+v, want the CPU-time limit", out.err)
			}
		})
	}
}
