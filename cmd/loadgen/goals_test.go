package main

import (
	"math"
	"testing"
	"time"
)

func TestEvaluate(t *testing.T) {
	t.Parallel()
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	loop := func(p50, cpu time.Duration, rate float64) *Phase {
		return &Phase{Turns: 100, TurnsPerSec: rate, Latency: Latency{P50: p50}, CPUPerTurn: cpu}
	}
	type want struct {
		name  string
		value float64
		met   bool
	}
	for _, tc := range []struct {
		name string
		c    Case
		want []want
	}{{
		name: "text at N=8: every goal, all met",
		c: Case{Turn: "text", Sessions: 8, HTTP: Phase{TurnsPerSec: 300, Latency: Latency{P50: ms(4)}},
			InProcess: loop(ms(1), ms(1), 1000), CPU: CPUReport{ServerPerTurn: ms(3)},
			Warm: &Warm{HTTP: Phase{Latency: Latency{P50: ms(2)}}, CPU: CPUReport{ServerPerTurn: ms(2.5)}}},
		want: []want{{goalRatio, 4, true}, {goalThroughput, 0.3, true}, {goalCPU, 3, true}, {goalFirstTurnCPU, 1.2, true}},
	}, {
		name: "text at N=1: no throughput goal; misses",
		c: Case{Turn: "text", Sessions: 1, HTTP: Phase{TurnsPerSec: 100, Latency: Latency{P50: ms(8)}},
			InProcess: loop(ms(1), ms(1), 1000), CPU: CPUReport{ServerPerTurn: ms(4)},
			Warm: &Warm{HTTP: Phase{Latency: Latency{P50: ms(4)}}, CPU: CPUReport{ServerPerTurn: ms(2)}}},
		want: []want{{goalRatio, 8, false}, {goalCPU, 4, false}, {goalFirstTurnCPU, 2, false}},
	}, {
		name: "steps:20 at N=8: no throughput goal but text's; 1.5x",
		c: Case{Turn: "steps:20", Sessions: 8, HTTP: Phase{TurnsPerSec: 10, Latency: Latency{P50: ms(30)}},
			InProcess: loop(ms(20), ms(10), 40), CPU: CPUReport{ServerPerTurn: ms(20)}},
		want: []want{{goalRatio, 1.5, true}, {goalCPU, 2, true}},
	}, {
		name: "tools:16 2x, tools:1 4x",
		c: Case{Turn: "tools:16", Sessions: 1, HTTP: Phase{Latency: Latency{P50: ms(21)}},
			InProcess: loop(ms(10), 0, 50)},
		want: []want{{goalRatio, 2.1, false}},
	}, {
		name: "the loop's CPU includes the mock's: no CPU goal",
		c: Case{Turn: "tools:1", Sessions: 1, HTTP: Phase{Latency: Latency{P50: ms(4)}},
			InProcess: &Phase{Turns: 10, Latency: Latency{P50: ms(1)}, CPUPerTurn: ms(1), CPUIncludesMock: true},
			CPU:       CPUReport{ServerPerTurn: ms(2)}},
		want: []want{{goalRatio, 4, true}},
	}, {
		name: "no baseline, no warm turns: no goal",
		c:    Case{Turn: "text", Sessions: 8, HTTP: Phase{Latency: Latency{P50: ms(4)}}, CPU: CPUReport{ServerPerTurn: ms(2)}},
	}, {
		name: "a turn without a ratio goal",
		c: Case{Turn: "tools:4", Sessions: 8, HTTP: Phase{Latency: Latency{P50: ms(4)}},
			InProcess: loop(ms(1), ms(1), 10), CPU: CPUReport{ServerPerTurn: ms(1)}},
		want: []want{{goalCPU, 1, true}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			evaluate(&c)
			if len(c.Goals) != len(tc.want) {
				t.Fatalf("goals %+v, want %+v", c.Goals, tc.want)
			}
			for i, w := range tc.want {
				g := c.Goals[i]
				if g.Name != w.name || math.Abs(g.Value-w.value) > 1e-9 || g.Met != w.met {
					t.Errorf("goal %d: %+v, want %+v", i, g, w)
				}
				if c.goal(w.name) != &c.Goals[i] {
					t.Errorf("goal(%q) is not goal %d", w.name, i)
				}
			}
		})
	}
}

func TestEvaluateRatios(t *testing.T) {
	t.Parallel()
	c := Case{Turn: "text", Sessions: 8, HTTP: Phase{TurnsPerSec: 200, Latency: Latency{P50: 6 * time.Millisecond}},
		InProcess: &Phase{Turns: 1, TurnsPerSec: 800, Latency: Latency{P50: 2 * time.Millisecond}, CPUPerTurn: time.Millisecond},
		Direct:    &Phase{Turns: 1, Latency: Latency{P50: time.Millisecond}},
		CPU:       CPUReport{ServerPerTurn: 5 * time.Millisecond},
		Warm:      &Warm{HTTP: Phase{Latency: Latency{P50: 3 * time.Millisecond}}, CPU: CPUReport{ServerPerTurn: 4 * time.Millisecond}}}
	evaluate(&c)
	if c.Ratio != 3 || c.DirectRatio != 6 || c.ThroughputRatio != 0.25 || c.CPURatio != 5 ||
		c.Warm.P50Ratio != 2 || c.Warm.CPURatio != 1.25 {
		t.Fatalf("ratios %v %v %v %v, warm %+v", c.Ratio, c.DirectRatio, c.ThroughputRatio, c.CPURatio, c.Warm)
	}
	if met, all := countGoals([]Case{c, c}); met != 4 || all != 8 { // ratio and turns/s met, CPU goals missed
		t.Fatalf("met %d of %d, want 4 of 8", met, all)
	}
	if got := goalCell(c.goal(goalThroughput)); got != ">= 0.25x ok" {
		t.Errorf("turns/s goal cell %q", got)
	}
	if got := goalCell(c.goal(goalCPU)); got != "<= 3x **miss**" {
		t.Errorf("CPU goal cell %q", got)
	}
	if got := goalCell(nil); got != "–" {
		t.Errorf("no goal: %q", got)
	}
}

func TestWarmSessions(t *testing.T) {
	t.Parallel()
	if n := warmSessions(3, 500, time.Second, 8); n != 3 {
		t.Errorf("with a count: %d", n)
	}
	if n := warmSessions(0, 100, 2*time.Second, 8); n != 416 {
		t.Errorf("100 turns/s for 2s, 8 clients: %d, want 416", n)
	}
	if n := warmSessions(0, 0, 2*time.Second, 1); n != 2 {
		t.Errorf("no rate: %d, want 2", n)
	}
	if n := warmSessions(0, 1e9, time.Second, 1); n != maxPool {
		t.Errorf("bound: %d", n)
	}
}

func TestGoalList(t *testing.T) {
	t.Parallel()
	got := goalList(map[string]float64{"steps:20": 1.5, "text": 4, "zz": 2, "aa": 3}, "<= ", "x")
	if want := "`text` <= 4x, `steps:20` <= 1.5x, `aa` <= 3x, `zz` <= 2x"; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
}
