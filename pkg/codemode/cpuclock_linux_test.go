package codemode

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestCPUBudgetFailsClosedWithoutAThreadClock (review of issue 17, finding 11): a thread clock
// read that failed returned 0, so a call's CPU time came out as zero (or negative, when the first
// reading had worked) and the budget was never spent: a busy program ran until the wall timeout.
// Here every reading fails (the clock of a thread id no kernel gives out: pid_max is at most
// 2^22): the watch charges wall time instead and stops the program at its CPU budget.
func TestCPUBudgetFailsClosedWithoutAThreadClock(t *testing.T) {
	t.Parallel()
	dead := threadClock{id: ^int32(1<<27)<<3 | 6, valid: true}
	if _, ok := dead.read(); ok {
		t.Fatal("the clock of thread 2^27 reads")
	}
	cfg, err := Config{CPUTimeout: 100 * time.Millisecond, WallTimeout: time.Minute,
		threadClock: func() threadClock { return dead }}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	js, rerr := strip(`for (;;) {}`)
	if rerr != nil {
		t.Fatal(rerr.msg)
	}
	out := run(context.Background(), &cfg, js, []string{"slow"}, &blockingHost{box: newMailbox()}, nil)
	if out.err == nil || out.err.kind != KindTimeout || !strings.Contains(out.err.msg, "CPU-time limit of 100ms") {
		t.Fatalf("outcome %+v, want the CPU-time limit", out.err)
	}
}

// TestThreadClockProbeReadsOnLinux: on Linux the probe reads the thread clock, so runs measure
// CPU time, not the wall-time stand-in (which would charge a program for time it is descheduled).
func TestThreadClockProbeReadsOnLinux(t *testing.T) {
	t.Parallel()
	if !threadClockWorks() {
		t.Fatal("the thread CPU clock cannot be read")
	}
	if _, ok := (threadClock{}).read(); ok {
		t.Fatal("the zero clock reads")
	}
}
