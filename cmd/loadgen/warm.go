package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dshd/dshd/pkg/llm"
)

// The warm turns of a case: the same script by the same number of clients, each turn the second
// of a session. They are measured after all the cases' first turns and the settling of the
// database that closes the last case's statistics, so that their database activity is in no
// case's counters; of the database they read only what is counted as it happens (statements,
// transaction ids).

// warmPause is the quiet time between a case's first turns and its measured warm turns.
const warmPause = 500 * time.Millisecond

// warmSessions is the number of sessions to prepare for a case's warm turns: count with -count,
// else what d takes at twice the first turns' rate (firstRate, turns/s), and two more rounds of
// every client.
func warmSessions(count int, firstRate float64, d time.Duration, clients int) int {
	if count > 0 {
		return min(count, maxPool)
	}
	return min(int(2*firstRate*d.Seconds())+2*clients, maxPool)
}

// measureWarm measures the warm turns of every case into its Warm: for each case it creates
// sessions, gives each one untimed turn, and then runs the second turns as runLoad runs the first
// ones, for o.warmDuration (with -count, that many turns).
func measureWarm(ctx context.Context, o options, e *env, db *dbSampler, key, presetID string, runs []*caseRun) error {
	for _, r := range runs {
		c := r.c
		conns := max(c.Sessions, 8)
		cfg := r.cfg
		cfg.Client = newClient(e.serverURL, key, conns)
		cfg.Duration = o.warmDuration
		n := warmSessions(o.count, c.HTTP.TurnsPerSec, o.warmDuration, c.Sessions)
		cfg.Turns = 0
		if o.count > 0 {
			cfg.Turns = n
		}
		t0 := time.Now()
		pool, err := createSessions(ctx, cfg.Client, presetID, n, conns)
		if err != nil {
			return fmt.Errorf("%s x%d: warm turns: %w", c.Turn, c.Sessions, err)
		}
		if pool, err = firstTurns(ctx, cfg.Client, cfg.Script, pool, conns); err != nil {
			return fmt.Errorf("%s x%d: warm turns: %w", c.Turn, c.Sessions, err)
		}
		progress("%s x%d: %d sessions created and given a first turn in %s", c.Turn, c.Sessions, n,
			time.Since(t0).Round(time.Millisecond))
		// What the server or PostgreSQL still does after the first turns is not the second ones'.
		if err := llm.Sleep(ctx, warmPause); err != nil {
			return err
		}
		if o.count > 0 {
			progress("%s x%d: HTTP+SSE warm turns (second turns), %d turns", c.Turn, c.Sessions, n)
		} else {
			progress("%s x%d: HTTP+SSE warm turns (second turns) for %s", c.Turn, c.Sessions, o.warmDuration)
		}
		db0, cpu0 := db.sample(ctx), sampleCPU(e)
		p, err := runLoad(ctx, cfg, pool)
		if err != nil {
			return fmt.Errorf("%s x%d: warm turns: %w", c.Turn, c.Sessions, err)
		}
		cpu1, db1 := sampleCPU(e), db.sample(ctx)
		w := &Warm{HTTP: p, CPU: cpuPerTurn(cpu0, cpu1, p.Turns, e), Statements: -1, WriteXacts: -1}
		if db0.ok && db1.ok && p.Turns > 0 {
			w.WriteXacts = float64(db1.nextXid-db0.nextXid) / float64(p.Turns)
			if db0.statementsOK && db1.statementsOK {
				w.Statements = float64(db1.statements-db0.statements) / float64(p.Turns)
			}
		}
		c.Warm = w
	}
	return nil
}

// firstTurns posts script once to every session of pool, with conns concurrent clients, and
// returns the sessions in a full channel.
func firstTurns(ctx context.Context, c *client, script string, pool chan string, conns int) (chan string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan string, len(pool))
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	for range min(conns, len(pool)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var id string
				select {
				case id = <-pool:
				default:
					return
				}
				if _, err := c.turn(ctx, id, script); err != nil {
					once.Do(func() { firstErr = fmt.Errorf("first turn: %w", err) })
					cancel()
					return
				}
				done <- id
			}
		}()
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return done, firstErr
}
