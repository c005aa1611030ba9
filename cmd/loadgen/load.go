package main

import (
	"context"
	"fmt"
	"slices"
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
	// CPUPerTurn is an in-process baseline's CPU per turn: this process's, that is the loop (or
	// the direct turns) and its HTTP client to the mock, and the mock model's as well when it is
	// served from this process (CPUIncludesMock). MockCPUPerTurn is the mock model's process's
	// (zero: its pid is not known). Both are zero for an HTTP+SSE phase, whose CPU is in
	// Case.CPU.
	CPUPerTurn      time.Duration `json:"cpuPerTurnNs,omitempty"`
	MockCPUPerTurn  time.Duration `json:"mockCpuPerTurnNs,omitempty"`
	CPUIncludesMock bool          `json:"cpuIncludesMock,omitempty"`
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

// loadConfig configures the HTTP+SSE load of one case.
type loadConfig struct {
	Client   *client
	PresetID string
	Script   string
	Sessions int           // concurrent clients
	Duration time.Duration // measured time; ignored when Turns > 0
	Turns    int           // measured turns in all, when > 0
	Warmup   int           // untimed turns per client, each on a session of its own
}

// maxPool bounds the sessions created ahead of one measurement.
const maxPool = 50_000

// warmUp runs cfg.Warmup turns per client, each on a session it creates first, and returns their
// latencies.
func warmUp(ctx context.Context, cfg loadConfig) ([]time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rec := newRecorder(cfg.Sessions)
	var wg sync.WaitGroup
	for i := range cfg.Sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range cfg.Warmup {
				id, err := cfg.Client.createSession(ctx, cfg.PresetID)
				if err != nil {
					rec.fail(fmt.Errorf("warm-up: %w", err))
					cancel()
					return
				}
				t0 := time.Now()
				if _, err := cfg.Client.turn(ctx, id, cfg.Script); err != nil {
					rec.fail(fmt.Errorf("warm-up: %w", err))
					cancel()
					return
				}
				rec.add(i, time.Since(t0), 0, 0)
			}
		}()
	}
	wg.Wait()
	_, err := rec.phase(0)
	if err == nil {
		err = ctx.Err()
	}
	var all []time.Duration
	for _, l := range rec.lat {
		all = append(all, l...)
	}
	return all, err
}

// prepareLoad warms the case up and creates the sessions of its measurement ahead, so that
// neither the turns nor the CPU and database counters of the measurement include creating
// sessions: cfg.Turns of them, or as many as the measurement takes at the pace of the fastest
// warm-up turn, a third more and two more rounds of every client.
func prepareLoad(ctx context.Context, cfg loadConfig) (chan string, error) {
	warm, err := warmUp(ctx, cfg)
	if err != nil {
		return nil, err
	}
	n := cfg.Turns
	if n <= 0 {
		fastest := max(slices.Min(warm), 100*time.Microsecond)
		n = int(1.34*float64(cfg.Sessions)*cfg.Duration.Seconds()/fastest.Seconds()) + 2*cfg.Sessions
	}
	n = min(n, maxPool)
	t0 := time.Now()
	pool, err := createSessions(ctx, cfg.Client, cfg.PresetID, n, max(cfg.Sessions, 8))
	if err != nil {
		return nil, err
	}
	progress("%s x%d: warmed up, %d sessions created ahead in %s", cfg.Script, cfg.Sessions, n,
		time.Since(t0).Round(time.Millisecond))
	return pool, nil
}

// runLoad runs the measurement: every client takes a fresh session from pool, posts cfg.Script
// to it and reads the stream until turn/end, again and again, until cfg.Duration has passed (a
// turn started before then is finished and counted) or the pool is empty. With cfg.Turns the
// pool holds just that many sessions. If the pool runs out before the duration has passed, the
// measurement ends early (Phase.Elapsed says when).
func runLoad(ctx context.Context, cfg loadConfig, pool chan string) (Phase, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rec := newRecorder(cfg.Sessions)
	var exhausted atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	for i := range cfg.Sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if cfg.Turns <= 0 && !time.Now().Before(deadline) {
					return
				}
				var id string
				select {
				case id = <-pool:
				default:
					exhausted.Store(cfg.Turns <= 0)
					return
				}
				t0 := time.Now()
				res, err := cfg.Client.turn(ctx, id, cfg.Script)
				if err != nil {
					if ctx.Err() == nil {
						rec.fail(err)
						cancel()
					}
					return
				}
				rec.add(i, time.Since(t0), res.Events, res.Steps)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if exhausted.Load() {
		progress("%s x%d: the sessions created ahead ran out after %s of %s", cfg.Script, cfg.Sessions,
			elapsed.Round(time.Millisecond), cfg.Duration)
	}
	p, err := rec.phase(elapsed)
	if err == nil {
		err = ctx.Err()
	}
	return p, err
}

// createSessions creates n sessions with conns concurrent requests and returns them in a full
// channel.
func createSessions(ctx context.Context, c *client, presetID string, n, conns int) (chan string, error) {
	ids := make(chan string, n)
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	for range min(conns, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				id, err := c.createSession(ctx, presetID)
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("create session: %w", err) })
					return
				}
				ids <- id
			}
		}()
	}
	wg.Wait()
	return ids, firstErr
}
