// Package worker runs sessions' turns as River jobs on any replica.
//
// Posting a message appends it to the session's durable inbox and, for a waking message
// (followup, steer), enqueues a TurnArgs job in the same transaction, so a message is never
// accepted without work scheduled for it. A job wakes its session: the worker takes the session's
// run lease (one holder at a time, enforced on the session's counter row in PostgreSQL, with every
// append fenced by it), repairs a turn a crashed holder left open, serves the inbox, and releases
// the lease only when no followup waits. A job that finds the lease held snoozes until it expires.
// A sweeper enqueues a job for every session whose lease expired, so a crashed replica's turn is
// repaired even when no new message arrives.
//
// Lock order: none across sessions. Per session, the counter row is the only lock; it is taken by
// appends, lease operations and the inbox check of a release, always in single statements or
// short transactions.
package worker

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/preset"
)

// Queue is the River queue of turn jobs.
const Queue = "turns"

// TurnArgs wakes a session. Reason is "message" for a posted message and "repair" for the sweeper.
type TurnArgs struct {
	TenantID  uuid.UUID `json:"tenantId"`
	SessionID uuid.UUID `json:"sessionId"`
	Reason    string    `json:"reason"`
}

// Kind implements river.JobArgs.
func (TurnArgs) Kind() string { return "dshd_turn" }

// InsertOpts implements river.JobArgsWithInsertOpts.
func (TurnArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: 25}
}

// Config configures the Service. Store, Hub, Presets, Agents and Pool are required.
type Config struct {
	Pool    *pgxpool.Pool
	Store   *pgstore.Store
	Hub     *pgstore.Hub
	Presets *preset.Store
	Agents  *agents.Agents
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
	// logs they hold together. Default 256 MiB.
	CachedRunners int
	CachedBytes   int
	// MaxTenantTurns is how many turns one tenant may run at once, on all replicas together
	// (a soft bound). Default 20.
	MaxTenantTurns int
	// InsertOnly makes a client that enqueues but runs no job (for tools and tests). Default false.
	InsertOnly bool
	Logger     *slog.Logger
}

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
	if c.CachedRunners <= 0 {
		c.CachedRunners = 1000
	}
	if c.CachedBytes <= 0 {
		c.CachedBytes = 256 << 20
	}
	if c.MaxTenantTurns <= 0 {
		c.MaxTenantTurns = 20
	}
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
	cfg    Config
	river  *river.Client[pgx.Tx]
	turns  *turnWorker
	cancel context.CancelFunc
	done   chan struct{}
	// stopping is set by Stop: no new serve starts, running ones stop after their turn.
	stopping atomic.Bool
}

// New returns a Service; nothing runs until Start.
func New(cfg Config) (*Service, error) {
	cfg.defaults()
	s := &Service{cfg: cfg}
	s.turns = &turnWorker{s: s, running: newRunning(), cache: newRunnerCache(cfg.CachedRunners, cfg.CachedBytes)}
	rc := &river.Config{
		Logger:        cfg.Logger.With("component", "river"),
		JobTimeout:    -1, // a turn runs as long as it needs; leases detect dead workers
		FetchCooldown: cfg.FetchCooldown,
	}
	if !cfg.InsertOnly {
		workers := river.NewWorkers()
		if err := river.AddWorkerSafely[TurnArgs](workers, s.turns); err != nil {
			return nil, err
		}
		rc.Workers = workers
		rc.Queues = map[string]river.QueueConfig{Queue: {MaxWorkers: cfg.MaxWorkers}}
		rc.FetchPollInterval = 500 * time.Millisecond
	}
	rcl, err := river.NewClient(riverpgxv5.New(cfg.Pool), rc)
	if err != nil {
		return nil, fmt.Errorf("worker: river client: %w", err)
	}
	s.river = rcl
	return s, nil
}

// Start starts the River client and the lease sweeper.
func (s *Service) Start(ctx context.Context) error {
	if s.cfg.InsertOnly {
		return nil
	}
	if err := s.river.Start(ctx); err != nil {
		return fmt.Errorf("worker: start river: %w", err)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel, s.done = cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		s.sweep(sctx)
	}()
	return nil
}

// Stop interrupts running turns (they end aborted with reason `disposed`), waits for their jobs to
// finish, and stops the sweeper.
func (s *Service) Stop(ctx context.Context) error {
	if s.cfg.InsertOnly || s.cancel == nil {
		return nil
	}
	s.stopping.Store(true)
	s.cancel()
	<-s.done
	s.turns.running.stopAll(agentloop.Cause{Kind: "disposed"})
	return s.river.Stop(ctx)
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
		if _, err := s.cfg.Pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE created_at < now() - interval '1 day'`); err != nil && ctx.Err() == nil {
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
			_, err := s.river.Insert(ctx, TurnArgs{TenantID: ref.TenantID, SessionID: ref.SessionID, Reason: "repair"},
				&river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: s.cfg.LeaseTTL}})
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

// ErrNoPreset is returned by Post for a session that has no preset to run.
var ErrNoPreset = &fault.Error{Code: fault.NoPreset, Message: "the session has no preset to run its turns"}

// ErrIdempotencyConflict is returned by Post when the idempotency key was used before with
// another request.
var ErrIdempotencyConflict = &fault.Error{Code: fault.IdempotencyConflict, Message: "the Idempotency-Key was used before with a different request"}

// Idempotency makes a Post safe to retry: the first Post with Key records its result in the same
// transaction; a later one with the same Key and Hash returns that result and appends nothing.
type Idempotency struct {
	Key  string
	Hash []byte // a digest of the request (session, mode, content)
}

// Posted is the result of a Post: the message id and the seq of its `agent/inbox/spliced` event.
// Replayed is true when an idempotent retry returned an earlier result.
type Posted struct {
	MessageID string
	Seq       int64
	Replayed  bool
}

// Post appends msg to the session's inbox, at the end of next-turn for a followup and of
// next-step for steer and inject, and for a followup or steer enqueues a turn job, all in one
// transaction: a message is never accepted without work scheduled for it.
func (s *Service) Post(ctx context.Context, tenantID, sessionID uuid.UUID, msg llm.Message, mode string, idem *Idempotency) (Posted, error) {
	target := eventlog.InboxNextTurn
	if mode == ModeSteer || mode == ModeInject {
		target = eventlog.InboxNextStep
	}
	var out Posted
	err := pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		if idem != nil {
			prev, found, err := idempotencyClaim(ctx, tx, tenantID, sessionID, idem)
			if err != nil || found {
				out = prev
				return err
			}
		}
		evs, err := s.cfg.Store.AppendTx(ctx, tx, tenantID, sessionID, func(h eventlog.Head) ([]eventlog.NewEvent, error) {
			return []eventlog.NewEvent{eventlog.Of(eventlog.Insertion(target, h.Inbox.Len(target), msg))}, nil
		})
		if err != nil {
			return err
		}
		out = Posted{MessageID: msg.ID, Seq: evs[0].Seq}
		if mode != ModeInject {
			if _, err := s.river.InsertTx(ctx, tx, TurnArgs{TenantID: tenantID, SessionID: sessionID, Reason: "message"}, nil); err != nil {
				return err
			}
		}
		if idem != nil {
			_, err = tx.Exec(ctx, `UPDATE idempotency_keys SET message_id = $3, seq = $4 WHERE tenant_id = $1 AND key = $2`,
				tenantID, idem.Key, out.MessageID, out.Seq)
		}
		return err
	})
	if err != nil {
		return Posted{}, err
	}
	return out, nil
}

// idempotencyClaim records the key, or finds the earlier request that used it. Two concurrent
// requests with one key serialize on its primary key: the second waits for the first to commit
// and then replays its result.
func idempotencyClaim(ctx context.Context, tx pgx.Tx, tenantID, sessionID uuid.UUID, idem *Idempotency) (Posted, bool, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO idempotency_keys (tenant_id, key, request_hash, session_id)
		VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, tenantID, idem.Key, idem.Hash, sessionID)
	if err != nil || tag.RowsAffected() == 1 {
		return Posted{}, false, err
	}
	var (
		hash  []byte
		msgID *string
		seq   *int64
	)
	err = tx.QueryRow(ctx, `SELECT request_hash, message_id, seq FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`,
		tenantID, idem.Key).Scan(&hash, &msgID, &seq)
	if err != nil {
		return Posted{}, false, err
	}
	if !bytes.Equal(hash, idem.Hash) || msgID == nil || seq == nil {
		return Posted{}, false, ErrIdempotencyConflict
	}
	return Posted{MessageID: *msgID, Seq: *seq, Replayed: true}, true, nil
}

// Cancel requests the cancellation of the session's running turn (LOOP-7): unless keepInbox it
// clears the inbox, and it writes the durable `agent/cancel` that the turn's runner, on whatever
// replica, reacts to. On an idle session (no lease held and an empty inbox) it does nothing and
// reports false.
func (s *Service) Cancel(ctx context.Context, tenantID, sessionID uuid.UUID, keepInbox bool) (bool, error) {
	evs, err := s.cfg.Store.Journal(nil, tenantID, sessionID, uuid.Nil).Append(ctx, func(h eventlog.Head) ([]eventlog.NewEvent, error) {
		if !h.Lease.HeldAt(time.Now()) && h.Inbox.NextTurn == 0 && h.Inbox.NextStep == 0 {
			return nil, nil
		}
		return agentloop.CancelEvents(h, agentloop.Cause{Kind: "user"}, keepInbox), nil
	})
	return len(evs) > 0, err
}
