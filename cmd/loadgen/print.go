package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// print writes the report: the cases' times, their per-turn counts and CPU, the background and
// the ceiling, then a markdown summary with the goals.
func (r *Report) print(w io.Writer) {
	fmt.Fprintf(w, "%s; %s per case, a fresh session per turn\n\n", r.Durability, r.Duration)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "turn\tN\tturns\tp50\tp90\tturns/s\tloop p50\tloop p90\tloop t/s\tratio\tdirect p50\tdirect t/s\t"+
		"warm turns\twarm p50\twarm p90\tfirst/warm p50\tsteps\t")
	for _, c := range r.Cases {
		h, wm := c.HTTP, c.Warm
		var wp *Phase
		if wm != nil {
			wp = &wm.HTTP
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t\n",
			c.Turn, c.Sessions, h.Turns, msf(h.Latency.P50), msf(h.Latency.P90), h.TurnsPerSec,
			phaseMs(c.InProcess, 50), phaseMs(c.InProcess, 90), phaseRate(c.InProcess), ratio(c.Ratio),
			phaseMs(c.Direct, 50), phaseRate(c.Direct),
			phaseTurns(wp), phaseMs(wp, 50), phaseMs(wp, 90), ratio(warmField(wm, func(w *Warm) float64 { return w.P50Ratio })),
			h.StepsPerTurn)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nms per turn; p50/p90: HTTP+SSE with every event durable, each turn a fresh session's first; loop: the")
	fmt.Fprintln(w, "agent loop in process over an in-memory journal, same mock, script and concurrency; ratio: p50 / loop p50;")
	fmt.Fprintln(w, "direct: model calls and the tool scheduler with no journal at all; warm: second turns of sessions that had")
	fmt.Fprintln(w, "one, same script and concurrency, measured after all the first turns; steps: model calls.")
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "turn\tN\tstmts\tcommits\twrite xacts\tWAL flush\tsrv CPU\tpg CPU\tclient CPU\tmock CPU\t"+
		"loop CPU\tloop mock CPU\tsrv/loop CPU\twarm stmts\twarm write xacts\twarm srv CPU\twarm pg CPU\twarm mock CPU\tfirst/warm srv CPU\tbusy\t")
	for _, c := range r.Cases {
		wm := c.Warm
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f%%\t\n",
			c.Turn, c.Sessions,
			dbField(c.DB, func(d *DBPerTurn) float64 { return d.Statements }),
			dbField(c.DB, func(d *DBPerTurn) float64 { return d.Commits }),
			dbField(c.DB, func(d *DBPerTurn) float64 { return d.WriteXacts }),
			dbField(c.DB, func(d *DBPerTurn) float64 { return d.WALSyncs }),
			cpuMs(c.CPU.ServerPerTurn), cpuMs(c.CPU.PostgresPerTurn), clientCPU(c.CPU), mockCPU(c.CPU),
			loopCPU(c.InProcess), loopMockCPU(c.InProcess), ratio(c.CPURatio),
			warmCount(wm, func(w *Warm) float64 { return w.Statements }),
			warmCount(wm, func(w *Warm) float64 { return w.WriteXacts }),
			warmCPU(wm, func(r CPUReport) time.Duration { return r.ServerPerTurn }),
			warmCPU(wm, func(r CPUReport) time.Duration { return r.PostgresPerTurn }),
			warmMockCPU(wm), ratio(warmField(wm, func(w *Warm) float64 { return w.CPURatio })),
			100*c.CPU.MachineBusy)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nper durable first turn: stmts (pg_stat_statements, BEGIN/COMMIT included), commits (xact_commit,")
	fmt.Fprintln(w, "read-only transactions included), write xacts (transaction ids assigned), WAL flushes (pg_stat_wal")
	fmt.Fprintln(w, "wal_sync); CPU ms per turn of the server, of PostgreSQL (all its processes), of the client (loadgen's")
	fmt.Fprintln(w, "HTTP+SSE clients; \"+mock\": the mock model is served from loadgen) and of the mock model's process; loop")
	fmt.Fprintln(w, "CPU: loadgen's CPU per in-process loop turn (the loop and its HTTP client to the mock), loop mock CPU the")
	fmt.Fprintln(w, "mock's meanwhile; srv/loop CPU: srv CPU / loop CPU; warm: the same per warm turn (commits and WAL flushes")
	fmt.Fprintln(w, "are not read for them; a second turn's model calls carry the first turn's history, which the mock's CPU")
	fmt.Fprintf(w, "shows); busy: the machine's %d cores during the HTTP+SSE first turns.\n", numCPU())
	if i := r.Idle; i != nil {
		fmt.Fprintf(w, "idle server, per second: %s stmts, %.1f write xacts, %.1f commits, %.1f WAL flushes, CPU ms server %.1f, PostgreSQL %.1f\n",
			dbField(&DBPerTurn{Statements: i.Statements}, func(d *DBPerTurn) float64 { return d.Statements }),
			i.WriteXacts, i.Commits, i.WALSyncs, 1000*i.ServerCPU, 1000*i.PostgresCPU)
	}
	for _, ce := range []*Ceiling{r.Ceiling1, r.CeilingK} {
		if ce != nil {
			fmt.Fprintf(w, "PostgreSQL insert ceiling, %d conn(s): %.0f single-row commits/s (%s per commit per connection)\n",
				ce.Conns, ce.PerSecond, ms(ce.MeanCommit))
		}
	}
	if r.CPUProfile != "" {
		fmt.Fprintf(w, "server CPU profile of %s: %s (go tool pprof -top %s)\n", r.ProfileCase, r.CPUProfile, r.CPUProfile)
	}
	printStatements(w, r.Cases)
	fmt.Fprintln(w)
	r.printMarkdown(w)
}

// printMarkdown writes the summary table with the goals, to paste into a note.
func (r *Report) printMarkdown(w io.Writer) {
	fmt.Fprintln(w, "| turn | N | durable ms p50 / p90 | loop ms p50 | ratio | ratio goal | durable turns/s | loop turns/s | turns/s goal | "+
		"stmts | commits | WAL flushes | CPU ms server / PG / client / mock | loop CPU ms | server / loop CPU | CPU goal | "+
		"warm ms p50 | first / warm p50 | warm server CPU ms | first / warm server CPU | first-turn goal |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|---|--:|--:|---|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|--:|---|")
	for _, c := range r.Cases {
		wm := c.Warm
		var wp *Phase
		if wm != nil {
			wp = &wm.HTTP
		}
		tg := "–"
		if g := c.goal(goalThroughput); g != nil {
			tg = fmt.Sprintf("%.2fx; %s", g.Value, goalCell(g))
		}
		fmt.Fprintf(w, "| `%s` | %d | %s / %s | %s | %s | %s | %.0f | %s | %s | %s | %s | %s | %s / %s / %s / %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			c.Turn, c.Sessions, msf(c.HTTP.Latency.P50), msf(c.HTTP.Latency.P90), phaseMs(c.InProcess, 50),
			ratio(c.Ratio), goalCell(c.goal(goalRatio)), c.HTTP.TurnsPerSec, phaseRate(c.InProcess), tg,
			dbField(c.DB, func(d *DBPerTurn) float64 { return d.Statements }),
			dbField(c.DB, func(d *DBPerTurn) float64 { return d.Commits }),
			dbField(c.DB, func(d *DBPerTurn) float64 { return d.WALSyncs }),
			cpuMs(c.CPU.ServerPerTurn), cpuMs(c.CPU.PostgresPerTurn), clientCPU(c.CPU), mockCPU(c.CPU),
			loopCPU(c.InProcess), ratio(c.CPURatio), goalCell(c.goal(goalCPU)),
			phaseMs(wp, 50), ratio(warmField(wm, func(w *Warm) float64 { return w.P50Ratio })),
			warmCPU(wm, func(r CPUReport) time.Duration { return r.ServerPerTurn }),
			ratio(warmField(wm, func(w *Warm) float64 { return w.CPURatio })), goalCell(c.goal(goalFirstTurnCPU)))
	}
	fmt.Fprintf(w, "\nGoals, each case against the plain in-process loop of this run at the same N: durable p50 / loop p50 "+
		"%s; at N = %d durable turns/s / the loop's %s; server CPU per turn <= %gx the loop's CPU per turn; "+
		"server CPU of a session's first turn <= %gx that of a warm (second) turn. Met %d of %d. "+
		"Per durable first turn: stmts, commits, WAL flushes, CPU ms of the server, PostgreSQL, the client and the mock. %s.\n",
		goalList(ratioGoals, "<= ", "x"), throughputGoalSessions, goalList(throughputGoals, ">= ", "x"),
		cpuGoal, firstTurnCPUGoal, r.GoalsMet, r.Goals, r.Durability)
}

// goalCell formats a goal's limit and verdict; "–" for none.
func goalCell(g *Goal) string {
	if g == nil {
		return "–"
	}
	op, verdict := "<=", "**miss**"
	if g.AtLeast {
		op = ">="
	}
	if g.Met {
		verdict = "ok"
	}
	return fmt.Sprintf("%s %gx %s", op, g.Limit, verdict)
}

// goalList formats goals by turn in the order of the default turns, then the others sorted.
func goalList(goals map[string]float64, op, unit string) string {
	var turns []string
	for _, t := range strings.Split(defaultTurns, ",") {
		if _, ok := goals[t]; ok {
			turns = append(turns, t)
		}
	}
	var rest []string
	for t := range goals {
		if !slices.Contains(turns, t) {
			rest = append(rest, t)
		}
	}
	slices.Sort(rest)
	parts := make([]string, 0, len(goals))
	for _, t := range append(turns, rest...) {
		parts = append(parts, fmt.Sprintf("`%s` %s%g%s", t, op, goals[t], unit))
	}
	return strings.Join(parts, ", ")
}

func phaseTurns(p *Phase) string {
	if p == nil {
		return "–"
	}
	return fmt.Sprintf("%d", p.Turns)
}

func warmField(w *Warm, f func(*Warm) float64) float64 {
	if w == nil {
		return 0
	}
	return f(w)
}

// warmCount formats a per-turn database count of the warm turns; -1 is n/a.
func warmCount(w *Warm, f func(*Warm) float64) string {
	if w == nil {
		return "–"
	}
	if v := f(w); v >= 0 {
		return fmt.Sprintf("%.1f", v)
	}
	return "n/a"
}

func warmCPU(w *Warm, f func(CPUReport) time.Duration) string {
	if w == nil {
		return "–"
	}
	return cpuMs(f(w.CPU))
}

func warmMockCPU(w *Warm) string {
	if w == nil {
		return "–"
	}
	return mockCPU(w.CPU)
}

// clientCPU formats the client's CPU per turn, marked when it includes the mock model's.
func clientCPU(r CPUReport) string {
	if r.MockInClient {
		return cpuMs(r.ClientPerTurn) + " (+mock)"
	}
	return cpuMs(r.ClientPerTurn)
}

// mockCPU formats the mock model's CPU per turn: "–" when its process is not known.
func mockCPU(r CPUReport) string {
	if r.MockInClient || r.MockPerTurn == 0 {
		return "–"
	}
	return cpuMs(r.MockPerTurn)
}

// loopCPU formats the in-process loop's CPU per turn, marked when it includes the mock model's.
func loopCPU(p *Phase) string {
	if p == nil || p.Turns == 0 {
		return "–"
	}
	if p.CPUIncludesMock {
		return cpuMs(p.CPUPerTurn) + " (+mock)"
	}
	return cpuMs(p.CPUPerTurn)
}

func loopMockCPU(p *Phase) string {
	if p == nil || p.Turns == 0 || p.CPUIncludesMock || p.MockCPUPerTurn == 0 {
		return "–"
	}
	return cpuMs(p.MockCPUPerTurn)
}

func normScript(s string) string { return strings.Join(strings.Fields(s), " ") }

// msf formats a duration in ms with two decimals.
func msf(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func phaseMs(p *Phase, pct int) string {
	if p == nil || p.Turns == 0 {
		return "–"
	}
	if pct == 90 {
		return msf(p.Latency.P90)
	}
	return msf(p.Latency.P50)
}

func phaseRate(p *Phase) string {
	if p == nil || p.Turns == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", p.TurnsPerSec)
}

func ratio(x float64) string {
	if x == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2fx", x)
}

func dbField(d *DBPerTurn, f func(*DBPerTurn) float64) string {
	if d == nil || f(d) < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", f(d))
}

// cpuMs formats a CPU time per turn in ms; zero means not measured.
func cpuMs(d time.Duration) string {
	if d == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond))
}
