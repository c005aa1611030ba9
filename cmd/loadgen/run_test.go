package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/pgcluster"
)

// TestRunEveryTurnKind runs one tiny case of every default turn kind end to end: a throwaway
// cluster, the server built from ./cmd/server, the mock model built from ./cmd/mockllm, both
// in-process baselines and the warm turns.
func TestRunEveryTurnKind(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and builds the server")
	}
	if _, err := pgcluster.BinDir(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := run(ctx, []string{"-turns", defaultTurns, "-sessions", "1", "-count", "3", "-warmup", "1",
		"-baseline-duration", "100ms", "-ceiling-duration", "0", "-idle-duration", "0", "-settle", "0", "-json"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.Bytes())
	}
	steps := map[string]float64{"text": 1, "tools:1": 2, "tools:16": 2, "steps:20": 21}
	if len(rep.Cases) != len(steps) {
		t.Fatalf("%d cases, want %d", len(rep.Cases), len(steps))
	}
	for _, c := range rep.Cases {
		want := steps[c.Turn]
		if c.HTTP.Turns != 3 || c.HTTP.StepsPerTurn != want {
			t.Errorf("%s: HTTP+SSE %d turns of %.1f steps, want 3 of %.0f", c.Turn, c.HTTP.Turns, c.HTTP.StepsPerTurn, want)
		}
		for name, p := range map[string]*Phase{"loop": c.InProcess, "direct": c.Direct} {
			if p == nil || p.Turns == 0 || p.StepsPerTurn != want {
				t.Errorf("%s: %s baseline %+v, want turns of %.0f steps", c.Turn, name, p, want)
			}
		}
		if c.DB == nil || c.DB.Statements <= 0 || c.DB.WriteXacts <= 0 || c.Ratio <= 0 {
			t.Errorf("%s: database counters %+v, ratio %.2f", c.Turn, c.DB, c.Ratio)
		}
		if w := c.Warm; w == nil || w.HTTP.Turns != 3 || w.HTTP.StepsPerTurn != want || w.Statements <= 0 || w.WriteXacts <= 0 {
			t.Errorf("%s: warm turns %+v, want 3 of %.0f steps with their statements", c.Turn, w, want)
		} else if w.P50Ratio <= 0 {
			t.Errorf("%s: first / warm p50 %.2f", c.Turn, w.P50Ratio)
		}
		if c.CPU.MockInClient || c.InProcess == nil || c.InProcess.CPUIncludesMock {
			t.Errorf("%s: the mock model's CPU is counted as loadgen's: %+v", c.Turn, c.CPU)
		}
		if c.goal(goalRatio) == nil {
			t.Errorf("%s: no ratio goal in %+v", c.Turn, c.Goals)
		}
	}
	if rep.Goals == 0 {
		t.Error("no goals evaluated")
	}
	var table bytes.Buffer
	rep.print(&table)
	for _, s := range []string{"| `text` | 1 |", "| `steps:20` | 1 |", "first / warm server CPU", "Goals,"} {
		if !bytes.Contains(table.Bytes(), []byte(s)) {
			t.Errorf("the report lacks %q:\n%s", s, table.Bytes())
		}
	}
}
