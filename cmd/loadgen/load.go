package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Phase is the result of one measured phase: turns run by concurrent clients.
type Phase struct {
	Clients      int           `json:"clients"`
	Turns        int           `json:"turns"`
	Elapsed      time.Duration `json:"elapsedNs"`
	TurnsPerSec  float64       `json:"turnsPerSecond"`
	Latency      Latency       `json:"latency"`
	StepsPerTurn float64       `json:"stepsPerTurn"` // model calls per turn
	PerStep      time.Duration `json:"perStepNs"`    // mean turn latency / steps per turn
	Events       int64         `json:"events"`
	EventsPerSec float64       `json:"eventsPerSecond"`
}

// recorder collects the turns of concurrent clients. It is safe for concurrent use: each client
// appends to its own slice.
type recorder struct {
	lat    [][]time.Duration
	events atomic.Int64
	steps  atomic.Int64
	mu     sync.Mutex
	err    error
}

func newRecorder(clients int) *recorder { return &recorder{lat: make([][]time.Duration, clients)} }

func (r *recorder) add(client int, d time.Duration, events, steps int) {
	r.lat[client] = append(r.lat[client], d)
	r.events.Add(int64(events))
	r.steps.Add(int64(steps))
}

func (r *recorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

// phase summarises what was recorded over elapsed; it returns the first client error, if any.
func (r *recorder) phase(elapsed time.Duration) (Phase, error) {
	var all []time.Duration
	for _, l := range r.lat {
		all = append(all, l...)
	}
	p := Phase{Clients: len(r.lat), Turns: len(all), Elapsed: elapsed, Latency: Summarize(all), Events: r.events.Load()}
	if elapsed > 0 {
		p.TurnsPerSec = float64(p.Turns) / elapsed.Seconds()
		p.EventsPerSec = float64(p.Events) / elapsed.Seconds()
	}
	if p.Turns > 0 {
		p.StepsPerTurn = float64(r.steps.Load()) / float64(p.Turns)
	}
	if p.StepsPerTurn > 0 {
		p.PerStep = time.Duration(float64(p.Latency.Mean) / p.StepsPerTurn)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return p, r.err
}

// loadConfig configures the HTTP+SSE load.
type loadConfig struct {
	Client       *client
	PresetID     string
	Script       string
	Sessions     int           // concurrent clients, each on its own session
	Duration     time.Duration // measured time; ignored when Turns > 0
	Turns        int           // measured turns in all, when > 0
	Warmup       int           // untimed turns per client before the measurement
	SessionTurns int           // turns per session before a client moves to a fresh one
	// Sample is called once every client has warmed up, right before the measurement starts, and
	// again right after the last measured turn (CPU counters).
	Sample func()
}

// httpLoad runs the load: every client posts cfg.Script to its session and reads the stream until
// turn/end, again and again. Creating a fresh session is not part of a turn's latency.
func httpLoad(ctx context.Context, cfg loadConfig) (Phase, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rec := newRecorder(cfg.Sessions)
	var budget atomic.Int64
	budget.Store(int64(cfg.Turns))
	var ready, done sync.WaitGroup
	startC := make(chan struct{})
	var deadline time.Time
	for i := range cfg.Sessions {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			s := &sessionTurns{c: cfg.Client, presetID: cfg.PresetID, max: cfg.SessionTurns}
			for w := 0; w < cfg.Warmup; w++ {
				if _, err := s.turn(ctx, cfg.Script); err != nil {
					rec.fail(fmt.Errorf("warm-up: %w", err))
					cancel()
					break
				}
			}
			ready.Done()
			<-startC
			for ctx.Err() == nil {
				if cfg.Turns > 0 && budget.Add(-1) < 0 {
					return
				}
				if cfg.Turns <= 0 && !time.Now().Before(deadline) {
					return
				}
				t0 := time.Now()
				res, err := s.turn(ctx, cfg.Script)
				if err != nil {
					if ctx.Err() == nil {
						rec.fail(err)
						cancel()
					}
					return
				}
				rec.add(i, time.Since(t0)-s.setup, res.Events, res.Steps)
			}
		}()
	}
	ready.Wait()
	if err := ctx.Err(); err != nil {
		done.Wait()
		_, rerr := rec.phase(0)
		return Phase{}, errors.Join(rerr, err)
	}
	cfg.Sample()
	start := time.Now()
	deadline = start.Add(cfg.Duration)
	close(startC)
	done.Wait()
	elapsed := time.Since(start)
	cfg.Sample()
	return rec.phase(elapsed)
}

// sessionTurns runs one client's turns, moving to a fresh session every max turns.
type sessionTurns struct {
	c        *client
	presetID string
	max      int
	id       string
	n        int
	setup    time.Duration // time the last turn spent creating its session
}

func (s *sessionTurns) turn(ctx context.Context, script string) (turnResult, error) {
	s.setup = 0
	if s.id == "" || (s.max > 0 && s.n >= s.max) {
		t0 := time.Now()
		id, err := s.c.createSession(ctx, s.presetID)
		if err != nil {
			return turnResult{}, err
		}
		s.id, s.n, s.setup = id, 0, time.Since(t0)
	}
	s.n++
	return s.c.turn(ctx, s.id, script)
}
