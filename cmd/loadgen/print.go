package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// ratioGoals are the goals of the HTTP+SSE durable turn time over the in-process loop's (median
// over median, same concurrency), by turn.
var ratioGoals = map[string]float64{"text": 5, "tools:16": 3, "steps:20": 2}

// throughputGoal is the goal of the durable turns/s over the in-process loop's at N > 1.
const throughputGoal = 0.5

// print writes the report: one row per case, the ceiling, then a markdown summary with the goals.
func (r *Report) print(w io.Writer) {
	fmt.Fprintf(w, "%s; %s per case, a fresh session per turn\n\n", r.Durability, r.Duration)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "turn\tN\tturns\tp50\tp90\tturns/s\tloop p50\tloop p90\tloop t/s\tratio\tdirect p50\tdirect t/s\t"+
		"steps\tstmts\tcommits\twrite xacts\tWAL flush\tsrv CPU\tpg CPU\tbusy\t")
	for _, c := range r.Cases {
		h := c.HTTP
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f%%\t\n",
			c.Turn, c.Sessions, h.Turns, msf(h.Latency.P50), msf(h.Latency.P90), h.TurnsPerSec,
			phaseMs(c.InProcess, 50), phaseMs(c.InProcess, 90), phaseRate(c.InProcess), ratio(c.Ratio),
			phaseMs(c.Direct, 50), phaseRate(c.Direct), h.StepsPerTurn,
			dbField(c.DB, func(d *DBPerTurn) float64 { return d.Statements }),
			dbField(c.DB, func(d *DBPerTurn) float64 { return d.Commits }),
			dbField(c.DB, func(d *DBPerTurn) float64 { return d.WriteXacts }),
			dbField(c.DB, func(d *DBPerTurn) float64 { return d.WALSyncs }),
			cpuMs(c.CPU.ServerPerTurn), cpuMs(c.CPU.PostgresPerTurn), 100*c.CPU.MachineBusy)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nms per turn; p50/p90: HTTP+SSE with every event durable; loop: the agent loop in process over an in-memory")
	fmt.Fprintln(w, "journal, same mock, script and concurrency; ratio: p50 / loop p50; direct: model calls and the tool scheduler")
	fmt.Fprintln(w, "with no journal at all; steps: model calls; per durable turn: stmts (pg_stat_statements, BEGIN/COMMIT")
	fmt.Fprintln(w, "included), commits (xact_commit, read-only transactions included), write xacts (transaction ids assigned),")
	fmt.Fprintln(w, "WAL flushes (pg_stat_wal wal_sync), CPU ms of the server and of PostgreSQL (all its processes); busy: the")
	fmt.Fprintf(w, "machine's %d cores during the HTTP+SSE measurement (loadgen and the mock included).\n", numCPU())
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
	fmt.Fprintln(w)
	r.printMarkdown(w)
}

// printMarkdown writes the summary table with the goals, to paste into a note.
func (r *Report) printMarkdown(w io.Writer) {
	fmt.Fprintln(w, "| turn | N | durable ms p50 / p90 | loop ms p50 | ratio | ratio goal | durable turns/s | loop turns/s | turns/s goal | stmts | commits | WAL flushes | server CPU ms | PG CPU ms |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|---|--:|--:|---|--:|--:|--:|--:|--:|")
	met, goals := 0, 0
	check := func(ok bool) string {
		goals++
		if ok {
			met++
			return "ok"
		}
		return "**miss**"
	}
	for _, c := range r.Cases {
		rg := "–"
		if g, ok := ratioGoals[normScript(c.Turn)]; ok && c.Ratio > 0 {
			rg = fmt.Sprintf("<= %gx %s", g, check(c.Ratio <= g))
		}
		tg := "–"
		if c.Sessions > 1 && c.InProcess != nil && c.InProcess.TurnsPerSec > 0 {
			tg = fmt.Sprintf(">= %.0f %s", throughputGoal*c.InProcess.TurnsPerSec,
				check(c.HTTP.TurnsPerSec >= throughputGoal*c.InProcess.TurnsPerSec))
		}
		fmt.Fprintf(w, "| `%s` | %d | %s / %s | %s | %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %s |\n",
			c.Turn, c.Sessions, msf(c.HTTP.Latency.P50), msf(c.HTTP.Latency.P90), phaseMs(c.InProcess, 50),
			ratio(c.Ratio), rg, c.HTTP.TurnsPerSec, phaseRate(c.InProcess), tg,
			dbField(c.DB, func(d *DBPerTurn) float64 { return d.Statements }),
			dbField(c.DB, func(d *DBPerTurn) float64 { return d.Commits }),
			dbField(c.DB, func(d *DBPerTurn) float64 { return d.WALSyncs }),
			cpuMs(c.CPU.ServerPerTurn), cpuMs(c.CPU.PostgresPerTurn))
	}
	fmt.Fprintf(w, "\nGoals: ratio (durable p50 / in-process loop p50, same N) `text` <= 5x, `tools:16` <= 3x, `steps:20` <= 2x; "+
		"at N > 1 durable turns/s >= %g x the loop's. Met %d of %d. Per turn: stmts, commits, WAL flushes, CPU ms. %s.\n",
		throughputGoal, met, goals, r.Durability)
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
