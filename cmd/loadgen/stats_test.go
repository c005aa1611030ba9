package main

import (
	"os"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, ms(i))
	}
	got := Summarize(ds)
	want := Latency{N: 100, Mean: 50500 * time.Microsecond, P50: ms(50), P90: ms(90), P99: ms(99), Max: ms(100)}
	if got != want {
		t.Fatalf("Summarize = %+v, want %+v", got, want)
	}
	if ds[0] != ms(100) {
		t.Fatal("Summarize sorted its argument")
	}
	if got := Summarize([]time.Duration{ms(7)}); got.P50 != ms(7) || got.P90 != ms(7) || got.P99 != ms(7) || got.Mean != ms(7) {
		t.Fatalf("one sample: %+v", got)
	}
	if got := Summarize(nil); got != (Latency{}) {
		t.Fatalf("no samples: %+v", got)
	}
}

func TestParseProcStat(t *testing.T) {
	t.Parallel()
	// A command name with spaces and parentheses, as the kernel writes it.
	line := "4242 (post (master) x) S 17 4242 4242 0 -1 4194560 1234 0 0 0 250 75 31 9 20 0 1 0 100 0 0\n"
	st, err := ParseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	want := ProcStat{PID: 4242, PPID: 17, Comm: "post (master) x", UTime: 250, STime: 75, CUTime: 31, CSTime: 9}
	if st != want {
		t.Fatalf("got %+v, want %+v", st, want)
	}
	for _, bad := range []string{"", "12 no-parens S 1", "12 (x) S 1 2 3"} {
		if _, err := ParseProcStat([]byte(bad)); err == nil {
			t.Errorf("ParseProcStat(%q) succeeded", bad)
		}
	}
}

func TestProcessCPUSelf(t *testing.T) {
	t.Parallel()
	st, err := ReadProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.PID != os.Getpid() || st.PPID != os.Getppid() {
		t.Fatalf("read %+v for pid %d (parent %d)", st, os.Getpid(), os.Getppid())
	}
	if _, err := TreeCPU(os.Getppid()); err != nil {
		t.Fatal(err)
	}
}

func TestParseMachineCPU(t *testing.T) {
	t.Parallel()
	busy, total, err := ParseMachineCPU([]byte("cpu  100 5 50 1000 20 3 2 1 7 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"))
	if err != nil {
		t.Fatal(err)
	}
	if busy != 161 || total != 1181 {
		t.Fatalf("busy %d total %d, want 161 1181", busy, total)
	}
	if _, _, err := ParseMachineCPU([]byte("intr 1 2 3")); err == nil {
		t.Fatal("accepted a line that is not cpu")
	}
}

func TestTopStatementsPerTurn(t *testing.T) {
	t.Parallel()
	before := stmtStats{1: {query: "SELECT 1", calls: 10, execMs: 5}, 2: {query: "INSERT  x\n  y", calls: 1, execMs: 1}}
	after := stmtStats{1: {query: "SELECT 1", calls: 30, execMs: 9, planMs: 1}, 2: {query: "INSERT  x\n  y", calls: 21, execMs: 41},
		3: {query: "UPDATE z", calls: 0}}
	got := topStatements(before, after, 10, 5)
	if len(got) != 2 || got[0].Query != "INSERT x y" || got[0].CallsPerTurn != 2 || got[0].ExecMsTurn != 4 ||
		got[1].Query != "SELECT 1" || got[1].ExecMsTurn != 0.4 || got[1].PlanMsTurn != 0.1 {
		t.Fatalf("top statements %+v", got)
	}
	if got := topStatements(before, after, 10, 1); len(got) != 1 || got[0].Query != "INSERT x y" {
		t.Fatalf("top 1 %+v", got)
	}
}
