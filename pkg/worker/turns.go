package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/telemetry"
)

// turnWorker serves the queue's wake jobs.
type turnWorker struct {
	s       *Service
	running *running
	cache   *runnerCache
	presets presetVersions
}

// presetVersions keeps the preset versions this replica's runners were built from, decoded: a
// version never changes (an update adds one), so a new session of a version another session
// used needs neither a read nor a decode. Its presets are only read (agents.Agents.Agent), never
// changed. Bounded by maxPresetVersions entries and maxPresetBytes of their bodies' JSON: past
// either it starts again empty.
type presetVersions struct {
	mu    sync.Mutex
	m     map[presetVersion]preset.Preset
	bytes int
}

type presetVersion struct {
	tenant, id uuid.UUID
	version    int
}

const (
	maxPresetVersions = 1024
	maxPresetBytes    = 32 << 20
)

// get returns the version, reading it with read the first time.
func (c *presetVersions) get(k presetVersion, read func() (preset.Preset, error)) (preset.Preset, error) {
	c.mu.Lock()
	p, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return p, nil
	}
	p, err := read()
	if err != nil {
		return p, err
	}
	body, err := json.Marshal(p.Body)
	if err != nil || len(body) > maxPresetBytes/8 {
		return p, nil // not kept: a body this large is read again by its next session
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxPresetVersions || c.bytes+len(body) > maxPresetBytes {
		c.m, c.bytes = make(map[presetVersion]preset.Preset), 0
	}
	if _, ok := c.m[k]; !ok {
		c.m[k] = p
		c.bytes += len(body)
	}
	return p, nil
}

// Work takes the session's lease and serves. A job that finds the lease held is done: the holder
// serves what waits before it releases (pgstore.LeaseRelease), so the job neither spins nor
// waits. One refused for its tenant's bound snoozes for a jittered while.
func (w *turnWorker) Work(ctx context.Context, a TurnArgs, _ int) error {
	cfg := w.s.cfg
	if w.s.stopping.Load() {
		return pgstore.Snooze(jitter(stoppingSnooze)) // leave it to another replica, or to this one's restart
	}
	// Every serve has its own lease identity: two jobs of one session on one replica must exclude
	// each other like jobs on different replicas. Fairness: a tenant runs at most MaxTenantTurns
	// turns at once, on all replicas together; the check is part of the take (a turn slot).
	owner := uuid.New()
	out, _, err := cfg.Store.LeaseTake(ctx, a.TenantID, a.SessionID, owner, cfg.LeaseTTL,
		cfg.Quotas.MaxTurns(ctx, a.TenantID, cfg.MaxTenantTurns))
	if errors.Is(err, eventlog.ErrNotFound) {
		return nil // the session was deleted: nothing to serve
	}
	if err != nil {
		return err
	}
	switch out {
	case pgstore.LeaseTenantFull:
		return pgstore.Snooze(jitter(tenantSnooze))
	case pgstore.LeaseBusy:
		return nil
	}
	return w.serveSession(ctx, a, owner, nil, unknownSeq, nil)
}

// unknownSeq tells serveSession to read where the serve's cancels begin.
const unknownSeq = -2

var (
	errLeaseLost = errors.New("worker: lease lost")
	errStopping  = errors.New("worker: the replica is stopping")
)

// tenantSnooze is how long a job waits when its tenant runs as many turns as it may.
const tenantSnooze = 500 * time.Millisecond

// stoppingSnooze is how long a job waits when this replica is stopping.
const stoppingSnooze = 250 * time.Millisecond

// jitter spreads a snooze of d over [d/2, 3d/2), so that jobs refused together do not all come
// back together.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}

// serve runs the session's turns while it holds the lease, renewing it, and releases it when no
// followup waits. A runner that served cleanly goes back to the cache, as the very last step:
// nothing of this serve touches it afterwards.
//
// sess is the session when the caller has read it (a post), nil to read it here.
//
// from is the seq before which no cancel is for this serve (a post's own append), or unknownSeq
// to read the head.
//
// A failure is logged here, with the trace of the turn it served (a wake job's failure is also
// logged by River, which retries it).
func (w *turnWorker) serveSession(ctx context.Context, a TurnArgs, owner uuid.UUID, sess *eventlog.Session, from int64, posted []eventlog.Event) error {
	w.cache.checkout(ctx, a.SessionID) // a serve that just released the lease puts its runner back first
	defer w.cache.checkin(a.SessionID)
	r, j, done, err := w.runner(ctx, a, owner, sess)
	if err != nil {
		w.release(a, owner)
		if ctx.Err() == nil {
			w.s.cfg.Logger.WarnContext(ctx, "serve failed", "session", a.SessionID, "reason", a.Reason, "err", err)
		}
		return err
	}
	if len(posted) > 0 {
		j.Seed(posted) // the runner's first read is what the post appended, when it is all it misses
	}
	keep, err := w.serveWith(telemetry.WithTurnLink(ctx, a.Trace), a, owner, r, j, from)
	if err != nil {
		w.s.cfg.Logger.WarnContext(r.TraceContext(ctx), "serve failed", "session", a.SessionID, "reason", a.Reason, "err", err)
	}
	if keep {
		w.cache.put(a.SessionID, r, j, done)
	} else {
		done() // the runner is dropped: its preset scope may be disposed
	}
	return err
}

// serveWith is serve with its runner. keep reports a clean release: a runner whose serve failed
// may hold staged events that were never written, and is not kept.
func (w *turnWorker) serveWith(ctx context.Context, a TurnArgs, owner uuid.UUID, r *agentloop.Runner, j *pgstore.Journal, from int64) (keep bool, _ error) {
	cfg := w.s.cfg
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	j.Open()
	defer j.Close()
	w.running.add(a.SessionID, r, cancel)
	defer w.running.remove(a.SessionID, r)
	if w.s.stopping.Load() {
		r.Handover() // a serve that began as the replica started draining opens no turn here
	}
	// Cancels written from now on are for this serve's turns; older ones are history. The log
	// is read before the watcher starts, so none in between is missed.
	if from == unknownSeq {
		from = -1
		if h, err := cfg.Store.SessionHead(ctx, a.TenantID, a.SessionID); err == nil {
			from = h.Last()
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); w.renew(ctx, a, owner, r, j, cancel) }()
	go func() { defer wg.Done(); w.watch(ctx, a, r, j, from) }()
	defer func() { cancel(nil); wg.Wait() }()
	resumed := int64(-1) // the park the last serve was to resume (park)
	for {
		_, err := r.Serve(ctx)
		if errors.Is(context.Cause(ctx), errStopping) {
			// The replica is shutting down: the turn was aborted (disposed), or it parked and is
			// parked or handed over (leaveStopping); what waits is left to the other replicas' jobs.
			if !j.Released() {
				w.leaveStopping(ctx, a, owner, r, err == nil)
			}
			return err == nil, nil
		}
		if err == nil && w.s.stopping.Load() && !j.Released() {
			// A draining replica: a turn parked or handed over, and whatever waits in the inbox,
			// go to another replica's serve (leaveStopping wakes the session when it must). The
			// runner, asked to hand over, is not kept.
			w.leaveStopping(ctx, a, owner, r, true)
			return false, nil
		}
		if err != nil {
			if errors.Is(context.Cause(ctx), errLeaseLost) || errors.Is(err, eventlog.ErrLeaseLost) {
				cfg.Logger.WarnContext(r.TraceContext(ctx), "lease lost while serving", "session", a.SessionID)
				return false, nil
			}
			err = fmt.Errorf("worker: serve session %s: %w", a.SessionID, err)
			// The runner could not write its log (its appends kept losing the race with posts, or
			// the database failed): it is dropped, and the lease is handed over at once, with a
			// wake job when anything waits, instead of held until it expires. The next holder
			// repairs the open turn (SES-14) and serves the inbox.
			if j.Released() {
				return false, err
			}
			if herr := w.s.queue.LeaseDrop(context.WithoutCancel(ctx), cfg.Store, a.TenantID, a.SessionID, owner); herr != nil {
				return false, err // the lease expires and the sweeper wakes the session
			}
			cfg.Logger.WarnContext(r.TraceContext(ctx), "serve failed; the session was handed over", "session", a.SessionID, "err", err)
			return false, nil
		}
		if p, ok := r.Parked(); ok {
			parked, again, err := w.park(ctx, a, owner, p, &resumed)
			if errors.Is(err, eventlog.ErrLeaseLost) {
				return false, nil
			}
			if err != nil {
				return false, err // the lease expires and the sweeper wakes the session
			}
			if parked || !again {
				return parked, nil // parked: the runner stays cached for the answer's serve
			}
			// An answer came, or the park can resume: serve again with the lease held (a serve
			// stopped or lost meanwhile is handled by the branches above).
			continue
		}
		if j.Released() {
			return true, nil // the turn's last append released the lease
		}
		released, err := cfg.Store.LeaseRelease(context.WithoutCancel(ctx), a.TenantID, a.SessionID, owner)
		if errors.Is(err, eventlog.ErrLeaseLost) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if released || ctx.Err() != nil {
			return released, nil
		}
		// A followup waits, or a waking message came during the serve (a steer after the last
		// step): serve again with the lease still held.
	}
}

// runner returns the session's runner: the one this replica kept from the session's last job
// (its view of the log is caught up by Serve, the log being append-only), or a new one built from
// the session's pinned preset version. done releases the runner's agent configuration (its
// preset scope): it is called once, when the runner is dropped.
func (w *turnWorker) runner(ctx context.Context, a TurnArgs, owner uuid.UUID, known *eventlog.Session) (_ *agentloop.Runner, _ *pgstore.Journal, done func(), _ error) {
	if r, j, done, ok := w.cache.take(a.SessionID); ok {
		j.SetOwner(owner)
		return r, j, done, nil
	}
	cfg := w.s.cfg
	var sess eventlog.Session
	if known != nil {
		sess = *known
	} else {
		var err error
		if sess, err = cfg.Store.SessionGet(ctx, a.TenantID, a.SessionID); err != nil {
			return nil, nil, nil, err
		}
	}
	if sess.PresetID == nil {
		return nil, nil, nil, ErrNoPreset
	}
	p, err := w.presets.get(presetVersion{a.TenantID, *sess.PresetID, sess.PresetVersion}, func() (preset.Preset, error) {
		return cfg.Presets.PresetVersionGet(ctx, a.TenantID, *sess.PresetID, sess.PresetVersion)
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("worker: preset of session %s: %w", a.SessionID, err)
	}
	lc, done, err := cfg.Agents.Agent(agents.Session{ID: a.SessionID, TenantID: a.TenantID, Preset: p})
	if err != nil {
		return nil, nil, nil, err
	}
	if cfg.Quotas != nil {
		lc.Admit = w.s.admitTurn(a.TenantID)
	}
	j := cfg.Store.Journal(cfg.Hub, a.TenantID, a.SessionID, owner)
	j.ReleaseAtTurnEnd(true)
	lc.TenantID = a.TenantID.String() // the turn spans' dshd.tenant.id
	return agentloop.NewRunner(lc, j), j, done, nil
}

func (w *turnWorker) release(a TurnArgs, owner uuid.UUID) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = w.s.cfg.Store.LeaseRelease(ctx, a.TenantID, a.SessionID, owner)
}

// renewRetry is the longest pause between renewals while they fail.
const renewRetry = 250 * time.Millisecond

// renew extends the lease every third of its TTL; losing it (another owner took it) stops the
// runner at once. A renewal that fails otherwise (the database unavailable) never stops the turn:
// it is retried every renewRetry (at most a third of the TTL), each try bounded by a third of the
// TTL, however long the outage lasts. The lease may expire meanwhile, but appends and renewals are
// fenced by the lease's owner only: a lease that expired and was not taken over is still this
// runner's, and the first renewal that reaches the database extends it again, before a sweeper
// that also waited for the database is likely to take the session over. One that was taken over
// answers ErrLeaseLost (the renewal, or the runner's next append), and the runner stops.
func (w *turnWorker) renew(ctx context.Context, a TurnArgs, owner uuid.UUID, r *agentloop.Runner, j *pgstore.Journal, cancel context.CancelCauseFunc) {
	cfg := w.s.cfg
	every := cfg.LeaseTTL / 3
	t := time.NewTimer(every)
	defer t.Stop()
	renewed := time.Now() // the lease runs until about renewed + LeaseTTL
	failing, expired := false, false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if j.Released() {
			return
		}
		try, stop := context.WithTimeout(ctx, every)
		err := cfg.Store.LeaseRenew(try, a.TenantID, a.SessionID, owner, cfg.LeaseTTL)
		stop()
		switch {
		case errors.Is(err, eventlog.ErrLeaseLost):
			if j.Released() {
				return // the turn's last append released it meanwhile
			}
			r.Interrupt(agentloop.Cause{Kind: eventlog.CauseDisposed, Reason: "lease lost"})
			cancel(errLeaseLost)
			return
		case err == nil:
			if failing {
				cfg.Logger.InfoContext(r.TraceContext(ctx), "lease renewed again", "session", a.SessionID,
					"after", time.Since(renewed).Round(time.Millisecond))
			}
			renewed, failing, expired = time.Now(), false, false
			t.Reset(every)
		case ctx.Err() != nil:
			return
		default:
			if !failing {
				cfg.Logger.WarnContext(r.TraceContext(ctx), "lease renewal failed; retrying", "session", a.SessionID, "err", err)
			}
			if !expired && time.Since(renewed) > cfg.LeaseTTL {
				cfg.Logger.WarnContext(r.TraceContext(ctx), "lease may have expired; still renewing: it stays this runner's unless another replica takes it",
					"session", a.SessionID, "err", err)
				expired = true
			}
			failing = true
			t.Reset(min(every, renewRetry))
		}
	}
}

// watch delivers cancel requests and approval decisions written by other writers to the running
// turn: it follows the
// log (eventlog.Follow) past what the runner's journal has seen, so the runner's own appends are
// neither waited for nor read back.
func (w *turnWorker) watch(ctx context.Context, a TurnArgs, r *agentloop.Runner, j *pgstore.Journal, from int64) {
	cfg := w.s.cfg
	if cfg.Hub == nil {
		return
	}
	read := from
	cursor := func() int64 { return max(read, j.Seen()) }
	_ = eventlog.Follow(ctx, cfg.Store.Journal(cfg.Hub, a.TenantID, a.SessionID, uuid.Nil), cursor,
		func(evs []eventlog.Event) error {
			for _, ev := range evs {
				if ev.Seq <= read {
					continue
				}
				switch ev.Type {
				case eventlog.TypeAgentCancel:
					if d, err := eventlog.Decode[eventlog.AgentCancel](ev); err == nil {
						r.Interrupt(d.Reason)
					}
				case eventlog.TypeApprovalDecided:
					if d, err := eventlog.Decode[eventlog.ApprovalDecided](ev); err == nil && cfg.Approvals != nil {
						cfg.Approvals.Deliver(d)
					}
				}
			}
			read = max(read, evs[len(evs)-1].Seq)
			return nil
		})
}

// running indexes the serves of this replica by session.
type running struct {
	mu sync.Mutex
	m  map[uuid.UUID]runningServe
}

type runningServe struct {
	r      *agentloop.Runner
	cancel context.CancelCauseFunc
}

func newRunning() *running { return &running{m: map[uuid.UUID]runningServe{}} }

// count returns the number of running serves.
func (rn *running) count() int {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return len(rn.m)
}

// has reports whether the session is being served here.
func (rn *running) has(id uuid.UUID) bool {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	_, ok := rn.m[id]
	return ok
}

func (rn *running) add(id uuid.UUID, r *agentloop.Runner, cancel context.CancelCauseFunc) {
	rn.mu.Lock()
	rn.m[id] = runningServe{r: r, cancel: cancel}
	rn.mu.Unlock()
}

func (rn *running) remove(id uuid.UUID, r *agentloop.Runner) {
	rn.mu.Lock()
	if rn.m[id].r == r {
		delete(rn.m, id)
	}
	rn.mu.Unlock()
}

// finishAll asks every running serve's runner to open no further turn (agentloop.Runner.Finish).
func (rn *running) finishAll() {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	for _, s := range rn.m {
		s.r.Finish()
	}
}

// handoverAll asks every running serve's runner to hand its turn over at its next step
// boundary (agentloop.Runner.Handover) and returns how many it asked.
func (rn *running) handoverAll() int {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	for _, s := range rn.m {
		s.r.Handover()
	}
	return len(rn.m)
}

// waitIdle waits until no serve runs or until deadline, and reports whether none runs.
func (rn *running) waitIdle(deadline time.Time) bool {
	for rn.count() > 0 {
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(min(20*time.Millisecond, time.Until(deadline)))
	}
	return true
}

// stopAll aborts every running turn with cause and makes every serve stop after it.
func (rn *running) stopAll(c agentloop.Cause) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	for _, s := range rn.m {
		s.r.Interrupt(c)
		s.cancel(errStopping)
	}
}

// runnerCache keeps the runners of recently served sessions, so the next job of a session starts
// from the runner's view of the log instead of reading the whole log again. A runner is taken out
// while it serves (one serve per session at a time, by the lease) and put back only after a clean
// release. The least recently kept runners are dropped beyond max runners or maxBytes of the
// memory they hold (runnerCost), a runner that alone would hold more than maxBytes/largeShare is
// not kept at all, and a dropped runner's release func (of its agent configuration) is called.
type runnerCache struct {
	mu       sync.Mutex
	max      int
	maxBytes int
	bytes    int
	tick     uint64
	items    map[uuid.UUID]cachedRunner
	// out holds the sessions whose runner a serve of this replica has out of the cache (from
	// checkout to checkin); the channel is closed at checkin. A serve that took the lease just
	// after another released it waits for that runner to come back instead of building a new
	// one from the log (which would start a new loop instance: request/header reason resume).
	out map[uuid.UUID]chan struct{}
}

// checkoutWait bounds how long a serve waits for another serve's runner to come back: the other
// is past its lease and only stopping its goroutines, so it is back within moments; past the
// bound the serve reads the log with a runner of its own.
const checkoutWait = 2 * time.Second

// checkout marks the session's runner as out for a serve of this replica, first waiting (up to
// checkoutWait, or ctx) while another serve still has it out. The caller calls checkin once it
// has put the runner back or dropped it.
func (c *runnerCache) checkout(ctx context.Context, id uuid.UUID) {
	timer := time.NewTimer(checkoutWait)
	defer timer.Stop()
	for {
		c.mu.Lock()
		ch, busy := c.out[id]
		if !busy {
			c.out[id] = make(chan struct{})
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return
		case <-timer.C:
			return
		}
	}
}

// checkin ends a checkout: a serve waiting for the runner goes on.
func (c *runnerCache) checkin(id uuid.UUID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.out[id]; ok {
		close(ch)
		delete(c.out, id)
	}
}

type cachedRunner struct {
	r       *agentloop.Runner
	j       *pgstore.Journal
	release func()
	used    uint64
	bytes   int
}

// largeShare: a runner that would hold more than 1/largeShare of the cache's bytes is not kept,
// so that one large session does not push out many small ones.
const largeShare = 8

// eventCost is what a runner holds for one event beyond twice its data (runnerCost): the event,
// its surface node, the slices, and the decoded payload an event prepared in this process keeps.
const eventCost = 448

// runnerCost estimates the memory a kept runner holds: its mirror's events (their data, and
// about eventCost bytes each for the event, its kept payload, its surface node and the slices)
// and the messages derived from the surface events (decoded copies of their text, at most as
// large as their data; the inbox it holds is spliced in from events it also holds). Twice the
// event data and eventCost an event are an upper bound of what the runner cache's tests
// measured: 1.5 times the data for a log of large posted messages, 3.1 times for a log of tool
// calls, chunks and results (about 330 bytes an event beyond twice the data).
func runnerCost(r *agentloop.Runner) int {
	b := r.LogBytes()
	if b == 0 {
		return 0 // nothing folded yet
	}
	return 2*b + eventCost*int(r.Cursor()+1)
}

func newRunnerCache(max, maxBytes int) *runnerCache {
	return &runnerCache{max: max, maxBytes: maxBytes, items: map[uuid.UUID]cachedRunner{}, out: map[uuid.UUID]chan struct{}{}}
}

// take removes the session's runner from the cache; the caller owns its release func.
func (c *runnerCache) take(id uuid.UUID) (*agentloop.Runner, *pgstore.Journal, func(), bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	it, ok := c.items[id]
	delete(c.items, id)
	c.bytes -= it.bytes
	return it.r, it.j, it.release, ok
}

// put keeps a runner and its release func; a runner it replaces or drops is released.
func (c *runnerCache) put(id uuid.UUID, r *agentloop.Runner, j *pgstore.Journal, release func()) {
	var dropped []func()
	defer func() {
		for _, d := range dropped { // outside the lock
			d()
		}
	}()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tick++
	if old, ok := c.items[id]; ok {
		c.bytes -= old.bytes
		delete(c.items, id)
		if old.release != nil {
			dropped = append(dropped, old.release)
		}
	}
	size := runnerCost(r)
	if size > c.maxBytes/largeShare {
		if release != nil {
			dropped = append(dropped, release) // its session's next serve reads its log again
		}
		return
	}
	c.items[id] = cachedRunner{r: r, j: j, release: release, used: c.tick, bytes: size}
	c.bytes += size
	for len(c.items) > c.max || c.bytes > c.maxBytes && len(c.items) > 0 {
		var oldest uuid.UUID
		min := ^uint64(0)
		for k, it := range c.items {
			if it.used < min {
				oldest, min = k, it.used
			}
		}
		it := c.items[oldest]
		if it.release != nil {
			dropped = append(dropped, it.release)
		}
		c.bytes -= it.bytes
		delete(c.items, oldest)
	}
}
