// Package worker runs sessions' turns on any replica.
//
// Posting a message appends it to the session's durable inbox and schedules its work in the same
// transaction, so a message is never accepted without work scheduled for it. For a waking message
// (followup, steer) that work is one of: the run lease's holder, when a turn runs (the post sets
// run_wake, and the holder serves what waits before it releases: no job); the poster itself, when
// the session is idle and this replica can serve it now (the post takes the lease); or else the
// session's one wake job (a River job, not enqueued again while one is queued). A job takes the
// session's run lease (one holder at a time, enforced on the session's counter row in PostgreSQL,
// with every append fenced by it, and at most MaxTenantTurns per tenant, taken atomically with a
// tenant turn slot), repairs a turn a crashed holder left open, serves the inbox, and releases the
// lease only when nothing waits. A job that finds the lease held is done (the holder serves); one
// refused for its tenant's bound snoozes for a jittered while. A sweeper enqueues a job for every
// session whose lease expired, so a crashed replica's turn is repaired even when no new message
// arrives.
//
// Lock order: none across sessions. Per session, the counter row is the only lock; it is taken by
// appends, lease operations and the inbox check of a release, always in single statements or
// short transactions; a lease take then claims a tenant slot without waiting (SKIP LOCKED).
package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/approval"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/telemetry"
)

// TurnArgs wakes a session (the queue's job).
type TurnArgs = pgstore.Wake

// Config configures the Service. Store, Hub, Presets and Agents are required.
type Config struct {
	Store   *pgstore.Store
	Hub     *pgstore.Hub
	Presets *pgstore.Presets
	Agents  *agents.Agents
	// Approvals, when set, is told of every approval/decided written to a session this replica
	// serves (the answer may come from any replica), so that the call waiting for it continues.
	Approvals *approval.Service
	// Owner identifies this replica (in logs). Default: a random UUID. Leases use a fresh
	// identity per served job.
	Owner uuid.UUID
	// LeaseTTL is how long a lease lasts without renewal; it is renewed every third of it.
	// A crashed holder's session is taken over after at most this long. Default 10s.
	LeaseTTL time.Duration
	// MaxWorkers is how many turns this replica runs at once. Default 100.
	MaxWorkers int
	// SweepInterval is how often expired leases are looked for. Default 5s.
	SweepInterval time.Duration
	// FetchCooldown is River's minimum pause between job fetches. Default 2ms.
	FetchCooldown time.Duration
	// CachedRunners is how many idle sessions' runners this replica keeps warm, so that a
	// session's next turn does not read its whole log again. Default 1000. CachedBytes bounds the
	// memory they hold together (estimated from their logs: the events and the messages derived
	// from them); a runner that alone would hold more than an eighth of it is not kept. Default
	// 256 MiB.
	CachedRunners int
	CachedBytes   int
	// MaxTenantTurns is how many turns one tenant may run at once, on all replicas together: the
	// check and the lease take are one atomic step (a tenant turn slot, pgstore.LeaseTake), and
	// a job refused for it snoozes for a jittered while. Default 20.
	MaxTenantTurns int
	// InboxMaxMessages and InboxMaxBytes bound a session's pending inbox (both lists, the
	// messages' JSON): a post beyond them is refused with fault.InboxFull, checked in the
	// posting transaction (pgstore.InboxBound). Defaults DefaultInboxMaxMessages and
	// DefaultInboxMaxBytes; negative: no bound.
	InboxMaxMessages int
	InboxMaxBytes    int64
	// SessionPosts and TenantPosts bound how fast messages are posted to one session and by one
	// tenant, on this replica (token buckets; a post beyond them is refused with fault.RateLimited
	// and the wait until a token is back, sent as Retry-After). Defaults DefaultSessionPosts and
	// DefaultTenantPosts; a negative PerSecond: no limit.
	SessionPosts Rate
	TenantPosts  Rate
	// Quotas, when set, are the tenants' limits (tenant.Limits): a tenant's maxConcurrentTurns
	// replaces MaxTenantTurns for it, and a turn of a tenant whose tokens of the day reached its
	// tokensPerDay ends at once with TOKEN_QUOTA_EXCEEDED instead of calling the model.
	Quotas *pgstore.Quotas
	// InsertOnly makes a client that enqueues but runs no job (for tools and tests). Default false.
	InsertOnly bool
	// QueueOnly makes every post to an idle session enqueue its wake job, as it did before
	// direct starts: no post takes the session's lease itself. Default false: a post to an idle
	// session takes the lease in its own transaction and this replica serves the session at once
	// (no job, no fetch).
	QueueOnly bool
	// DrainFinish is how long Stop lets running turns go on toward their end before it asks
	// them to hand over at their next step boundary (E6, docs/rules.md). Default 5s.
	DrainFinish time.Duration
	Logger      *slog.Logger
}

// DefaultDrainFinish is Config.DrainFinish's default.
const DefaultDrainFinish = 5 * time.Second

// Defaults of Config.InboxMaxMessages and Config.InboxMaxBytes.
const (
	DefaultInboxMaxMessages = 100
	DefaultInboxMaxBytes    = 8 << 20
)

func (c *Config) defaults() {
	if c.Owner == uuid.Nil {
		c.Owner = uuid.New()
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 10 * time.Second
	}
	if c.MaxWorkers <= 0 {
		c.MaxWorkers = 100
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = 5 * time.Second
	}
	if c.DrainFinish <= 0 {
		c.DrainFinish = DefaultDrainFinish
	}
	if c.CachedRunners <= 0 {
		c.CachedRunners = 1000
	}
	if c.CachedBytes <= 0 {
		c.CachedBytes = 256 << 20
	}
	if c.MaxTenantTurns <= 0 {
		c.MaxTenantTurns = 20
	}
	if c.InboxMaxMessages == 0 {
		c.InboxMaxMessages = DefaultInboxMaxMessages
	}
	if c.InboxMaxBytes == 0 {
		c.InboxMaxBytes = DefaultInboxMaxBytes
	}
	c.SessionPosts = c.SessionPosts.orDefault(DefaultSessionPosts)
	c.TenantPosts = c.TenantPosts.orDefault(DefaultTenantPosts)
	if c.FetchCooldown <= 0 {
		c.FetchCooldown = 2 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Service enqueues and runs turn jobs. Start is idempotent through River; Stop blocks until
// running turns have ended.
type Service struct {
	cfg   Config
	queue *pgstore.Queue
	turns *turnWorker
	posts *postLimiter
	// base is the context of direct serves (posts that took the lease); Stop interrupts them as
	// it does jobs' serves, and waits for them (direct).
	base   context.Context
	direct sync.WaitGroup
	cancel context.CancelFunc
	done   chan struct{}
	// stopping is set by Stop: no new serve starts, running ones stop after their turn.
	stopping atomic.Bool
}

// New returns a Service; nothing runs until Start.
func New(cfg Config) (*Service, error) {
	cfg.defaults()
	s := &Service{cfg: cfg, posts: newPostLimiter(cfg.SessionPosts, cfg.TenantPosts)}
	s.turns = &turnWorker{s: s, running: newRunning(), cache: newRunnerCache(cfg.CachedRunners, cfg.CachedBytes)}
	q, err := pgstore.NewQueue(cfg.Store, pgstore.QueueConfig{MaxWorkers: cfg.MaxWorkers,
		FetchCooldown: cfg.FetchCooldown, InsertOnly: cfg.InsertOnly, Logger: cfg.Logger, DeadlineFunc: s.runDeadline}, s.turns.Work)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	s.queue = q
	return s, nil
}

// Start starts the River client and the lease sweeper.
func (s *Service) Start(ctx context.Context) error {
	if s.cfg.InsertOnly {
		return nil
	}
	if err := s.queue.Start(ctx); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel, s.done, s.base = cancel, make(chan struct{}), context.WithoutCancel(ctx)
	go func() {
		defer close(s.done)
		s.sweep(sctx)
	}()
	return nil
}

// Stop drains the replica within ctx (its deadline is the bound an operator sets,
// DSHD_SHUTDOWN_TIMEOUT): it takes no new job and serves no new post, lets the running turns go
// on for Config.DrainFinish, then asks each to hand over at its next step boundary (turn/parked
// with reason handover; another replica resumes it as a new loop instance, E6), and aborts what
// still runs (reason `disposed`) shortly before ctx's deadline, so the replica exits within the
// bound. Parked turns need nothing: they hold no lease. Then the sweeper and the queue stop.
func (s *Service) Stop(ctx context.Context) error {
	if s.cfg.InsertOnly || s.cancel == nil {
		return nil
	}
	s.stopping.Store(true)
	s.cancel()
	<-s.done
	running := s.turns.running
	abortAt := time.Now().Add(time.Hour)
	if d, ok := ctx.Deadline(); ok {
		// The last stretch is for the turns aborted then to write their ends and for the queue.
		abortAt = d.Add(-min(time.Second, time.Until(d)/4))
	}
	finishBy := time.Now().Add(s.cfg.DrainFinish)
	if finishBy.After(abortAt) {
		finishBy = abortAt
	}
	running.finishAll()
	if running.waitIdle(finishBy) {
		s.cfg.Logger.Info("drain: every running turn finished")
	} else {
		n := running.handoverAll()
		s.cfg.Logger.Info("drain: running turns hand over at their next step boundary", "turns", n)
		if !running.waitIdle(abortAt) {
			running.stopAll(agentloop.Cause{Kind: eventlog.CauseDisposed, Reason: "the replica stopped before the turn reached a step boundary"})
			s.cfg.Logger.Warn("drain: turns still running at the bound were aborted", "turns", running.count())
		}
	}
	done := make(chan struct{})
	go func() { s.direct.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return s.queue.Stop(ctx)
}

// Owner returns this replica's identity.
func (s *Service) Owner() uuid.UUID { return s.cfg.Owner }

// sweep enqueues a repair job for every session whose lease expired.
func (s *Service) sweep(ctx context.Context) {
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.posts.prune(time.Now())
		if err := s.cfg.Store.IdempotencyExpire(ctx, 24*time.Hour); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("idempotency key expiry failed", "err", err)
		}
		refs, err := s.cfg.Store.LeasesExpired(ctx, 100)
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.Warn("lease sweep failed", "err", err)
			}
			continue
		}
		for _, ref := range refs {
			err := s.queue.WakeUnique(ctx, TurnArgs{TenantID: ref.TenantID, SessionID: ref.SessionID, Reason: "repair"}, s.cfg.LeaseTTL)
			if err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn("enqueue repair failed", "session", ref.SessionID, "err", err)
			}
		}
	}
}

// Message modes (LOOP-1).
const (
	ModeFollowup = "followup"
	ModeSteer    = "steer"
	ModeInject   = "inject"
)

// ErrNoPreset is returned by Post, and by a serve, for a session that has no preset to run.
var ErrNoPreset = pgstore.ErrNoPreset

// ErrIdempotencyConflict is returned by Post when the idempotency key was used before with
// another request.
var ErrIdempotencyConflict = pgstore.ErrIdempotencyConflict

// Idempotency makes a Post safe to retry (pgstore.Idempotency).
type Idempotency = pgstore.Idempotency

// Posted is the result of a Post: the message id and the seq of its `agent/inbox/spliced` event.
// Replayed is true when an idempotent retry returned an earlier result. LastSeq is the session's
// last seq right after the post (-1 for a replay, which reads no head). Events are the events the
// post committed (none for a replay): a stream of the post starts with them without a read.
type Posted struct {
	MessageID string
	Seq       int64
	Replayed  bool
	LastSeq   int64
	Events    []eventlog.Event
}

// Post appends msg to the session's inbox, at the end of next-turn for a followup and of
// next-step for steer and inject, and for a followup or steer schedules its work, all in one
// transaction: a message is never accepted without work scheduled for it.
//
// A waking post to a busy session leaves the message to the lease's holder, which serves it
// before it releases. One to an idle session takes the session's run lease in the same
// transaction when this replica can serve it now (Config.QueueOnly unset, not stopping, fewer
// than MaxWorkers serves, a tenant turn slot free): it then serves the session at once, without a
// job. Otherwise the session's wake job is enqueued (unless one is queued), which any replica
// runs.
//
// A post beyond the session's or the tenant's post rate is refused with fault.RateLimited, one
// beyond the session's inbox bound with fault.InboxFull; a post to an unknown, other tenant's or
// deleted session with ErrNotFound, one to a session without a preset with ErrNoPreset (read
// with the head: the caller need not read the session first).
func (s *Service) Post(ctx context.Context, tenantID, sessionID uuid.UUID, msg llm.Message, mode string, idem *Idempotency) (Posted, error) {
	if err := s.posts.allow(tenantID, sessionID, time.Now()); err != nil {
		return Posted{}, err
	}
	target := eventlog.InboxNextTurn
	if mode == ModeSteer || mode == ModeInject {
		target = eventlog.InboxNextStep
	}
	p := pgstore.PostParams{Tenant: tenantID, Session: sessionID, Idem: idem, Message: msg.ID, Runnable: true,
		Trace: telemetry.Traceparent(ctx),
		Bound: pgstore.InboxBound{Messages: max(s.cfg.InboxMaxMessages, 0), Bytes: max(s.cfg.InboxMaxBytes, 0)},
		Build: func(h eventlog.Head) ([]eventlog.NewEvent, error) {
			return []eventlog.NewEvent{eventlog.Of(eventlog.Insertion(target, h.Inbox.Len(target), msg))}, nil
		}}
	if mode != ModeInject {
		p.Queue = s.queue
		p.Busy = s.turns.running.has(sessionID) // its lease is held here: no idle post to try
		if s.mayServeNow() {
			p.Lease = &pgstore.LeaseOffer{Owner: uuid.New(), TTL: s.cfg.LeaseTTL,
				MaxTenant: s.cfg.Quotas.MaxTurns(ctx, tenantID, s.cfg.MaxTenantTurns)}
		}
	}
	// A post that may serve the session subscribes to it first: the hub then vouches for the
	// post's commit (Hub.Observe), and the serve's followers (its cancel watcher, the message's
	// stream) need not read the log to learn where it ends.
	unsub, gen := func() {}, uint64(0)
	if p.Lease != nil && s.cfg.Hub != nil {
		_, unsub = s.cfg.Hub.Subscribe(sessionID)
		gen = s.cfg.Hub.Gen()
	}
	out, err := s.cfg.Store.Post(ctx, p)
	if err != nil {
		unsub()
		return Posted{}, err
	}
	if out.Leased {
		if s.cfg.Hub != nil {
			s.cfg.Hub.Observe(sessionID, out.Head.Last(), gen)
		}
		sess := eventlog.Session{ID: sessionID, TenantID: tenantID, PresetID: out.Preset, PresetVersion: out.PresetVersion}
		s.serveNow(TurnArgs{TenantID: tenantID, SessionID: sessionID, Reason: "message", Trace: p.Trace}, p.Lease.Owner, sess, out.Head.Last(), out.Events, unsub)
	} else {
		unsub()
	}
	last := int64(-1)
	if !out.Replayed {
		last = out.Head.Last()
	}
	return Posted{MessageID: out.MessageID, Seq: out.Seq, Replayed: out.Replayed, LastSeq: last, Events: out.Events}, nil
}

// Cancel requests the cancellation of the session's running or parked turn (LOOP-7): unless
// keepInbox it clears the inbox, and it writes the durable `agent/cancel` that the turn's runner,
// on whatever replica, reacts to. A running turn's holder sees it through its watch; a parked turn
// holds no lease, so the cancel of one wakes the session in the same transaction (the resumed
// runner sees the cancel after turn/parked and ends the turn). On an idle session (no lease held,
// an empty inbox, no parked turn) it does nothing and reports false.
func (s *Service) Cancel(ctx context.Context, tenantID, sessionID uuid.UUID, keepInbox bool) (bool, error) {
	var parked bool
	out, err := s.cfg.Store.Post(ctx, pgstore.PostParams{Tenant: tenantID, Session: sessionID, Queue: s.queue,
		Prepare: func(ctx context.Context, r pgstore.EventReader) error {
			evs, err := readPark(ctx, r)
			_, parked = eventlog.Parked(evs)
			return err
		},
		WakeIf: func() bool { return parked },
		Build: func(h eventlog.Head) ([]eventlog.NewEvent, error) {
			if !parked && !h.Lease.HeldAt(time.Now()) && h.Inbox.NextTurn == 0 && h.Inbox.NextStep == 0 {
				return nil, nil
			}
			return agentloop.CancelEvents(h, agentloop.Cause{Kind: eventlog.CauseUser}, keepInbox), nil
		}})
	return len(out.Events) > 0, err
}

// mayServeNow reports whether a post may take the session's lease and serve it on this replica.
func (s *Service) mayServeNow() bool {
	return !s.cfg.QueueOnly && !s.cfg.InsertOnly && s.base != nil && !s.stopping.Load() &&
		s.turns.running.count() < s.cfg.MaxWorkers
}

// serveNow serves a session whose lease a post took, on a goroutine of its own under the service's
// context; posted are the events the post appended (the runner's journal is seeded with them). A
// failure is logged (by serveSession, in the trace of the turn it served); the lease then expires
// and the sweeper wakes the session. unsub ends the post's subscription to the session, once
// the serve has ended (its journal subscribes while it serves).
func (s *Service) serveNow(a TurnArgs, owner uuid.UUID, sess eventlog.Session, from int64, posted []eventlog.Event, unsub func()) {
	s.direct.Add(1)
	go func() {
		defer s.direct.Done()
		defer unsub()
		_ = s.turns.serveSession(s.base, a, owner, &sess, from, posted)
	}()
}
