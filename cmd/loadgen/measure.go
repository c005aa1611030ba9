package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dshd/dshd/pkg/llm"
)

// caseRun is a case being measured.
type caseRun struct {
	c           *Case
	cfg         loadConfig
	pool        chan string
	before, end dbSample
}

// measure runs every case (turn kind by concurrency), then the warm turns of every case (-warm)
// and then the ceiling.
//
// All cases are warmed up and their sessions created first. Then, for each case: the in-process
// baselines (no database activity), a pause until the database has been quiet for o.settle
// (PostgreSQL's backends then have reported all their statistics, see dbSample), the HTTP+SSE
// measurement of first turns. The statistics of a measurement are read when the database has
// settled after it, during the next case's baselines, less what the idle server did meanwhile
// (measured once, before the first case). The warm turns come after the last case's statistics
// were read (warm.go).
func measure(ctx context.Context, o options, e *env) (*Report, error) {
	rep := &Report{Duration: o.duration, Cases: make([]Case, 0, len(o.turnKinds)*len(o.sessions))}
	if o.url == "" {
		rep.Durability = "self-contained cluster: fsync=on synchronous_commit=on full_page_writes=on"
	} else {
		rep.Durability = "external server and database (settings as configured)"
	}
	var bl *baseline
	if o.loopBaseline || o.directBaseline {
		var err error
		if bl, err = newBaseline(e.mockURL); err != nil {
			return nil, fmt.Errorf("in-process baseline: %w", err)
		}
		defer bl.close()
	}
	key, err := setupKey(ctx, o, e)
	if err != nil {
		return nil, err
	}
	presetID, err := newClient(e.serverURL, key, 1).createPreset(ctx, e.mockURL)
	if err != nil {
		return nil, err
	}
	var db *dbSampler
	if e.databaseURL != "" {
		conn, err := pgx.Connect(ctx, e.databaseURL)
		if err != nil {
			return nil, err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		db = newDBSampler(ctx, conn)
	}
	profileCase := o.profileCase
	if o.cpuProfile != "" && profileCase == "" {
		profileCase = caseName(o.turnKinds[0], o.sessions[0])
	}

	var runs []*caseRun
	for _, turn := range o.turnKinds {
		for _, n := range o.sessions {
			rep.Cases = append(rep.Cases, Case{Turn: turn, Sessions: n})
			r := &caseRun{c: &rep.Cases[len(rep.Cases)-1], cfg: loadConfig{Client: newClient(e.serverURL, key, n),
				PresetID: presetID, Script: turn, Sessions: n, Duration: o.duration, Turns: o.count, Warmup: o.warmup}}
			if r.pool, err = prepareLoad(ctx, r.cfg); err != nil {
				return nil, fmt.Errorf("%s x%d: %w", turn, n, err)
			}
			runs = append(runs, r)
		}
	}
	// The sessions created ahead arrive in seconds, faster than autovacuum analyzes their tables:
	// planned on statistics of near-empty tables, the turns' statements scanned every session row
	// (PostgreSQL CPU and latency several times higher in the first cases). A table that grew
	// over time would have been analyzed on the way.
	if db != nil {
		if _, err := db.conn.Exec(ctx, "ANALYZE"); err != nil {
			return nil, fmt.Errorf("analyze: %w", err)
		}
	}
	lastDB := time.Now() // the last database activity of loadgen
	var pending *caseRun // the measured case whose statistics wait for the database to settle
	settle := func() dbSample {
		if err := llm.Sleep(ctx, time.Until(lastDB.Add(o.settle))); err != nil {
			return dbSample{}
		}
		s := db.sample(ctx)
		if pending != nil {
			pending.c.DB = dbPerTurn(pending.before, pending.end, s, rep.Idle, pending.c.HTTP.Turns)
			pending = nil
		}
		return s
	}
	for k, r := range runs {
		c := r.c
		if bl != nil {
			if err := runBaselines(ctx, o, e, bl, c); err != nil {
				return nil, err
			}
		}
		profiled := o.cpuProfile != "" && caseName(c.Turn, c.Sessions) == profileCase
		if profiled {
			settle()
			progress("%s x%d: restarting the server with DSHD_CPU_PROFILE=%s", c.Turn, c.Sessions, o.cpuProfile)
			if err := e.restartServer(ctx, []string{"DSHD_CPU_PROFILE=" + o.cpuProfile}); err != nil {
				return nil, err
			}
			r.cfg.Client = newClient(e.serverURL, key, c.Sessions)
			if _, err := warmUp(ctx, r.cfg); err != nil {
				return nil, fmt.Errorf("%s x%d: %w", c.Turn, c.Sessions, err)
			}
			lastDB = time.Now()
		} else if r.cfg.Client.base != e.serverURL { // restarted after a profiled case
			r.cfg.Client = newClient(e.serverURL, key, c.Sessions)
		}
		if o.settle > 0 {
			progress("%s x%d: waiting for the database to settle", c.Turn, c.Sessions)
		}
		r.before = settle()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if k == 0 && o.idleDuration > 0 && db != nil {
			progress("idle background: %s with no turns", o.idleDuration)
			cpu0 := sampleCPU(e)
			if err := llm.Sleep(ctx, o.idleDuration); err != nil {
				return nil, err
			}
			idle := db.sample(ctx)
			rep.Idle = idleRate(r.before, idle, cpu0, sampleCPU(e))
			r.before = idle
		}
		if o.count > 0 {
			progress("%s x%d: HTTP+SSE durable load, %d turns", c.Turn, c.Sessions, o.count)
		} else {
			progress("%s x%d: HTTP+SSE durable load for %s", c.Turn, c.Sessions, o.duration)
		}
		stmts := db.readStatements(ctx)
		cpuBefore := sampleCPU(e)
		c.HTTP, err = runLoad(ctx, r.cfg, r.pool)
		if err != nil {
			return nil, fmt.Errorf("%s x%d: %w", c.Turn, c.Sessions, err)
		}
		cpuAfter := sampleCPU(e)
		r.end = db.sample(ctx)
		c.Statements = topStatements(stmts, db.readStatements(ctx), c.HTTP.Turns, o.topStatements)
		lastDB = time.Now()
		r.pool = nil
		c.CPU = cpuPerTurn(cpuBefore, cpuAfter, c.HTTP.Turns, e)
		if c.InProcess != nil && c.InProcess.StepsPerTurn != c.HTTP.StepsPerTurn {
			progress("warning: %s x%d: %.1f model calls per turn over HTTP+SSE, %.1f in process",
				c.Turn, c.Sessions, c.HTTP.StepsPerTurn, c.InProcess.StepsPerTurn)
		}
		if !profiled {
			pending = r
			continue
		}
		// Stopping the server writes the profile; its backends report their statistics as they
		// exit, so the case's counters are complete right after.
		e.stopServer()
		e.stopServer = nil
		rep.CPUProfile, rep.ProfileCase = o.cpuProfile, profileCase
		progress("server CPU profile of %s written to %s", profileCase, o.cpuProfile)
		if err := llm.Sleep(ctx, 300*time.Millisecond); err != nil {
			return nil, err
		}
		c.DB = dbPerTurn(r.before, r.end, db.sample(ctx), nil, c.HTTP.Turns)
		if k < len(runs)-1 || o.warm {
			if err := e.restartServer(ctx, []string{"DSHD_CPU_PROFILE="}); err != nil {
				return nil, err
			}
			lastDB = time.Now()
		}
	}
	if pending != nil {
		if o.settle > 0 {
			progress("waiting for the database to settle")
		}
		settle()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if o.warm {
		if err := measureWarm(ctx, o, e, db, key, presetID, runs); err != nil {
			return nil, err
		}
	}
	for i := range rep.Cases {
		evaluate(&rep.Cases[i])
	}
	rep.GoalsMet, rep.Goals = countGoals(rep.Cases)
	// The ceiling comes last: its tens of thousands of commits leave the cluster busy afterwards
	// (checkpoint, WAL), which doubled the PostgreSQL CPU and the latency of the first cases.
	if err := measureCeilings(ctx, o, e, rep); err != nil {
		return nil, err
	}
	if o.cpuProfile != "" && rep.CPUProfile == "" {
		return nil, fmt.Errorf("-profile-case %q is none of the cases", profileCase)
	}
	return rep, nil
}

// runBaselines runs the in-process baselines of c.
func runBaselines(ctx context.Context, o options, e *env, bl *baseline, c *Case) error {
	for _, b := range []struct {
		on   bool
		name string
		f    turnFunc
		out  **Phase
	}{{o.loopBaseline, "agent loop, in-memory journal", bl.loopTurn, &c.InProcess},
		{o.directBaseline, "direct, no journal", bl.directTurn, &c.Direct}} {
		if !b.on {
			continue
		}
		progress("%s x%d: in-process %s for %s", c.Turn, c.Sessions, b.name, o.baselineDuration)
		p, err := bl.run(ctx, e, b.f, c.Turn, c.Sessions, o.baselineDuration)
		if err != nil {
			return fmt.Errorf("%s x%d: in-process %s: %w", c.Turn, c.Sessions, b.name, err)
		}
		*b.out = &p
	}
	return nil
}

// caseName names a case for -profile-case: TURN@N.
func caseName(turn string, sessions int) string { return fmt.Sprintf("%s@%d", turn, sessions) }

// measureCeilings measures the PostgreSQL insert ceiling with one connection and with
// o.ceilingConns, into rep.
func measureCeilings(ctx context.Context, o options, e *env, rep *Report) error {
	if e.databaseURL == "" || o.ceilingDuration <= 0 {
		return nil
	}
	for _, k := range []int{1, o.ceilingConns} {
		progress("insert ceiling: %d connection(s) for %s", k, o.ceilingDuration)
		c, err := measureCeiling(ctx, e.databaseURL, k, o.ceilingDuration)
		if err != nil {
			return err
		}
		if k == 1 {
			rep.Ceiling1 = &c
		} else {
			rep.CeilingK = &c
		}
	}
	return nil
}
