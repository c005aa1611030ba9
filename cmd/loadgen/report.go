package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
)

// Report is everything one run measured.
type Report struct {
	Script       string     `json:"script"`
	Sessions     int        `json:"sessions"`
	SessionTurns int        `json:"sessionTurns"`
	Durability   string     `json:"durability"`
	Ceiling1     *Ceiling   `json:"ceiling1,omitempty"`
	CeilingK     *Ceiling   `json:"ceilingK,omitempty"`
	InProcess1   *Phase     `json:"inProcess1,omitempty"`
	InProcessN   *Phase     `json:"inProcessN,omitempty"`
	HTTP         Phase      `json:"http"`
	CPU          CPUReport  `json:"cpu"`
	DB           *DBPerTurn `json:"dbPerTurn,omitempty"`
	// Ratio is the mean HTTP+SSE turn time over the mean in-process turn time at the same
	// concurrency; Ratio1 compares with the in-process loop running alone.
	Ratio  float64 `json:"ratio,omitempty"`
	Ratio1 float64 `json:"ratio1,omitempty"`
}

// CPUReport is the CPU time used during the HTTP+SSE phase, per turn. Zero means not measured.
type CPUReport struct {
	ServerPerTurn   time.Duration `json:"serverPerTurnNs"`
	PostgresPerTurn time.Duration `json:"postgresPerTurnNs"`
	LoadgenPerTurn  time.Duration `json:"loadgenPerTurnNs"` // this process: clients and the mock model
	MachineBusy     float64       `json:"machineBusy"`      // fraction of all cores busy
	Cores           int           `json:"cores"`
}

// cpuSample is one reading of the CPU counters.
type cpuSample struct {
	server, postgres, self time.Duration
	busy, total            int64
}

func sampleCPU(e *env) cpuSample {
	var s cpuSample
	if e.serverPID > 0 {
		s.server, _ = ProcessCPU(e.serverPID)
	}
	if e.postmasterPID > 0 {
		s.postgres, _ = TreeCPU(e.postmasterPID)
	}
	s.self, _ = ProcessCPU(os.Getpid())
	s.busy, s.total, _ = MachineCPU()
	return s
}

// measure runs the ceiling, the baselines and the load, in that order, on a prepared env.
func measure(ctx context.Context, o options, e *env) (*Report, error) {
	rep := &Report{Script: o.script, Sessions: o.sessions, SessionTurns: o.sessionTurns}
	if o.url == "" {
		rep.Durability = "self-contained cluster: fsync=on synchronous_commit=on full_page_writes=on"
	} else {
		rep.Durability = "external server and database (settings as configured)"
	}
	if e.databaseURL != "" && o.ceilingDuration > 0 {
		for _, k := range []int{1, o.ceilingConns} {
			progress("insert ceiling: %d connection(s) for %s", k, o.ceilingDuration)
			c, err := measureCeiling(ctx, e.databaseURL, k, o.ceilingDuration)
			if err != nil {
				return nil, err
			}
			if k == 1 {
				rep.Ceiling1 = &c
			} else {
				rep.CeilingK = &c
			}
		}
	}
	if o.baselineDuration > 0 {
		for _, n := range []int{1, o.sessions} {
			if n == o.sessions && rep.InProcessN != nil {
				break
			}
			progress("in-process baseline: %d goroutine(s) for %s", n, o.baselineDuration)
			p, err := inProcess(ctx, e.mockURL, o.script, n, o.baselineDuration)
			if err != nil {
				return nil, fmt.Errorf("in-process baseline: %w", err)
			}
			if n == 1 {
				rep.InProcess1 = &p
			}
			if n == o.sessions {
				rep.InProcessN = &p
			}
		}
	}
	c, err := setupClient(ctx, o, e)
	if err != nil {
		return nil, err
	}
	presetID, err := c.createPreset(ctx, e.mockURL)
	if err != nil {
		return nil, err
	}
	var statConn *pgx.Conn
	if e.databaseURL != "" {
		if statConn, err = pgx.Connect(ctx, e.databaseURL); err != nil {
			return nil, err
		}
		defer statConn.Close(context.WithoutCancel(ctx))
	}
	var before, after cpuSample
	var dbBefore, dbAfter dbSample
	n := 0
	progress("HTTP+SSE load: %d session(s), script %q", o.sessions, o.script)
	rep.HTTP, err = httpLoad(ctx, loadConfig{Client: c, PresetID: presetID, Script: o.script, Sessions: o.sessions,
		Duration: o.duration, Turns: o.turns, Warmup: o.warmup, SessionTurns: o.sessionTurns,
		Sample: func() {
			if n++; n == 1 {
				dbBefore, before = sampleDB(ctx, statConn), sampleCPU(e)
			} else {
				after = sampleCPU(e)
				time.Sleep(1100 * time.Millisecond) // backends flush their statistics about once a second
				dbAfter = sampleDB(ctx, statConn)
			}
		}})
	if err != nil {
		return nil, err
	}
	rep.CPU = cpuPerTurn(before, after, rep.HTTP.Turns, e)
	rep.DB = dbPerTurn(dbBefore, dbAfter, rep.HTTP.Turns)
	if rep.InProcessN != nil && rep.InProcessN.Latency.Mean > 0 {
		rep.Ratio = float64(rep.HTTP.Latency.Mean) / float64(rep.InProcessN.Latency.Mean)
	}
	if rep.InProcess1 != nil && rep.InProcess1.Latency.Mean > 0 {
		rep.Ratio1 = float64(rep.HTTP.Latency.Mean) / float64(rep.InProcess1.Latency.Mean)
	}
	return rep, nil
}

func setupClient(ctx context.Context, o options, e *env) (*client, error) {
	key := o.key
	if key == "" {
		admin := newClient(e.serverURL, "", 1)
		var err error
		if key, err = admin.createTenant(ctx, e.adminToken, fmt.Sprintf("loadgen-%d", time.Now().UnixNano())); err != nil {
			return nil, err
		}
	}
	return newClient(e.serverURL, key, o.sessions), nil
}

func cpuPerTurn(before, after cpuSample, turns int, e *env) CPUReport {
	r := CPUReport{Cores: numCPU()}
	if turns == 0 {
		return r
	}
	per := func(d time.Duration) time.Duration { return d / time.Duration(turns) }
	if e.serverPID > 0 {
		r.ServerPerTurn = per(after.server - before.server)
	}
	if e.postmasterPID > 0 {
		r.PostgresPerTurn = per(after.postgres - before.postgres)
	}
	r.LoadgenPerTurn = per(after.self - before.self)
	if dt := after.total - before.total; dt > 0 {
		r.MachineBusy = float64(after.busy-before.busy) / float64(dt)
	}
	return r
}

// print writes the report as a compact table.
func (r *Report) print(w io.Writer) {
	fmt.Fprintf(w, "script %q, %d session(s), %d turn(s) per session; %s\n\n", r.Script, r.Sessions, r.SessionTurns, r.Durability)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tclients\tturns\tturns/s\tmean\tp50\tp99\tsteps/turn\tper step\tevents/s\t")
	row := func(name string, p *Phase) {
		if p == nil {
			return
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%s\t%s\t%s\t%.1f\t%s\t%.0f\t\n", name, p.Clients, p.Turns, p.TurnsPerSec,
			ms(p.Latency.Mean), ms(p.Latency.P50), ms(p.Latency.P99), p.StepsPerTurn, ms(p.PerStep), p.EventsPerSec)
	}
	row("in-process x1", r.InProcess1)
	if r.InProcessN != r.InProcess1 {
		row(fmt.Sprintf("in-process x%d", r.Sessions), r.InProcessN)
	}
	row("HTTP+SSE durable", &r.HTTP)
	tw.Flush()
	fmt.Fprintln(w)
	if r.Ratio > 0 {
		fmt.Fprintf(w, "ratio HTTP+SSE durable turn time / in-process turn time: %.2fx (same concurrency)", r.Ratio)
		if r.Ratio1 > 0 && r.Sessions > 1 {
			fmt.Fprintf(w, ", %.2fx (vs in-process alone)", r.Ratio1)
		}
		fmt.Fprintln(w)
	}
	if r.HTTP.Turns > 0 && r.HTTP.StepsPerTurn > 0 {
		fmt.Fprintf(w, "events per turn: %.1f\n", float64(r.HTTP.Events)/float64(r.HTTP.Turns))
	}
	c := r.CPU
	fmt.Fprintf(w, "CPU per turn: server %s, postgres %s, loadgen+mock %s; machine busy %.0f%% of %d cores\n",
		msOrNA(c.ServerPerTurn), msOrNA(c.PostgresPerTurn), ms(c.LoadgenPerTurn), 100*c.MachineBusy, c.Cores)
	if d := r.DB; d != nil {
		fmt.Fprintf(w, "PostgreSQL per turn: %.1f commits (%.1f per step), %.1f rollbacks, %.0f rows inserted, %.1f WAL flushes, %.0f KiB WAL\n",
			d.Commits, d.Commits/max(r.HTTP.StepsPerTurn, 1), d.Rollbacks, d.Inserted, d.WALSyncs, d.WALBytes/1024)
	}
	for _, ce := range []*Ceiling{r.Ceiling1, r.CeilingK} {
		if ce != nil {
			fmt.Fprintf(w, "PostgreSQL insert ceiling, %d conn(s): %.0f single-row commits/s (%s per commit per connection)\n",
				ce.Conns, ce.PerSecond, ms(ce.MeanCommit))
		}
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

func msOrNA(d time.Duration) string {
	if d == 0 {
		return "n/a"
	}
	return ms(d)
}
