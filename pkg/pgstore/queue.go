package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/telemetry"
)

// QueueName is the River queue of session wake jobs.
const QueueName = "turns"

// Wake is a job that wakes a session: some replica takes its run lease and serves its inbox.
// Reason is "message" for a posted message and "repair" for the lease sweeper.
type Wake struct {
	TenantID  uuid.UUID `json:"tenantId"`
	SessionID uuid.UUID `json:"sessionId"`
	Reason    string    `json:"reason"`
	// Trace is the W3C traceparent of the request that asked for the wake (a post), when it was
	// traced: the first turn the wake serves links to it (docs/observability.md).
	Trace string `json:"trace,omitempty"`
}

// Kind implements river.JobArgs.
func (Wake) Kind() string { return "dshd_turn" }

// InsertOpts implements river.JobArgsWithInsertOpts.
func (Wake) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: QueueName, MaxAttempts: 25} }

// WakeFunc serves one wake job; attempt counts from 1. Returning Snooze(d) runs the job again
// after d without counting an attempt.
type WakeFunc func(ctx context.Context, w Wake, attempt int) error

// Snooze returns the error a WakeFunc returns to have its job run again after d.
func Snooze(d time.Duration) error { return river.JobSnooze(d) }

// QueueConfig configures a Queue.
type QueueConfig struct {
	// MaxWorkers is how many wake jobs this replica runs at once. Default 100.
	MaxWorkers int
	// FetchCooldown is River's minimum pause between job fetches. Default 2ms.
	FetchCooldown time.Duration
	// FetchPollInterval is how often River polls for jobs when no insert notification arrived.
	// Default 500ms.
	FetchPollInterval time.Duration
	// InsertOnly makes a queue that enqueues but runs no job (for tools and tests).
	InsertOnly bool
	// Logger receives River's diagnostics. Default slog.Default().
	Logger *slog.Logger
	// Metrics records how long jobs waited; default the store's (StoreConfig.Metrics).
	Metrics *telemetry.Metrics
	// DeadlineFunc runs the deadline jobs of parked turns (ParkDeadline). A queue that runs jobs
	// needs it: every replica may fetch such a job.
	DeadlineFunc DeadlineFunc
}

// Queue is the durable job queue of session wakes (River over the same PostgreSQL): a wake
// inserted in a transaction runs if and only if that transaction commits, on any replica, and a
// job of a crashed worker is rescued.
type Queue struct {
	client *river.Client[pgx.Tx]
	insert bool
}

// NewQueue returns the queue in the store's database, running fn for every wake job unless
// cfg.InsertOnly. Nothing runs until Start.
func NewQueue(st *Store, cfg QueueConfig, fn WakeFunc) (*Queue, error) {
	if cfg.MaxWorkers <= 0 {
		cfg.MaxWorkers = 100
	}
	if cfg.FetchCooldown <= 0 {
		cfg.FetchCooldown = 2 * time.Millisecond
	}
	if cfg.FetchPollInterval <= 0 {
		cfg.FetchPollInterval = 500 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	rc := &river.Config{
		Logger:        cfg.Logger.With("component", "river"),
		JobTimeout:    -1, // a turn runs as long as it needs; leases detect dead workers
		FetchCooldown: cfg.FetchCooldown,
	}
	if !cfg.InsertOnly {
		workers := river.NewWorkers()
		if cfg.Metrics == nil {
			cfg.Metrics = st.metrics
		}
		if err := river.AddWorkerSafely[Wake](workers, &wakeWorker{fn: fn, metrics: cfg.Metrics}); err != nil {
			return nil, err
		}
		if cfg.DeadlineFunc == nil {
			return nil, errors.New("pgstore: a queue that runs jobs needs a DeadlineFunc")
		}
		if err := river.AddWorkerSafely[ParkDeadline](workers, &deadlineWorker{fn: cfg.DeadlineFunc}); err != nil {
			return nil, err
		}
		rc.Workers = workers
		rc.Queues = map[string]river.QueueConfig{QueueName: {MaxWorkers: cfg.MaxWorkers}}
		rc.FetchPollInterval = cfg.FetchPollInterval
	}
	client, err := river.NewClient(riverpgxv5.New(st.pool), rc)
	if err != nil {
		return nil, fmt.Errorf("pgstore: river client: %w", err)
	}
	return &Queue{client: client, insert: cfg.InsertOnly}, nil
}

// Start starts running jobs (nothing for an insert-only queue).
func (q *Queue) Start(ctx context.Context) error {
	if q.insert {
		return nil
	}
	if err := q.client.Start(ctx); err != nil {
		return fmt.Errorf("pgstore: start river: %w", err)
	}
	return nil
}

// Stop waits for running jobs to return, until ctx is done.
func (q *Queue) Stop(ctx context.Context) error {
	if q.insert {
		return nil
	}
	return q.client.Stop(ctx)
}

// WakeUnique enqueues w unless an equal wake was enqueued within period (the sweeper's repairs).
func (q *Queue) WakeUnique(ctx context.Context, w Wake, period time.Duration) error {
	_, err := q.client.Insert(ctx, w, &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: period}})
	return translate(err, "enqueue wake")
}

func (q *Queue) wakeTx(ctx context.Context, tx pgx.Tx, w Wake) error {
	_, err := q.client.InsertTx(ctx, tx, w, nil)
	return err
}

// wakeWorker is the River worker of wake jobs.
type wakeWorker struct {
	river.WorkerDefaults[Wake]
	fn      WakeFunc
	metrics *telemetry.Metrics
}

// Work implements river.Worker. The job's wait is the time from its scheduled time (its insert,
// or the end of its snooze) to now.
func (w *wakeWorker) Work(ctx context.Context, job *river.Job[Wake]) error {
	if w.metrics != nil && job.JobRow != nil {
		w.metrics.JobWait(time.Since(job.ScheduledAt))
	}
	return w.fn(ctx, job.Args, job.Attempt)
}

// ParkDeadline is a job that decides one wait of a parked turn (E6) once its deadline has passed:
// scheduled by LeasePark at Wait.DeadlineMs, it does nothing when the wait was answered or the
// turn moved on. Its args are its identity (unique by args): parking the same turn again
// schedules no second job for a wait.
type ParkDeadline struct {
	TenantID  uuid.UUID         `json:"tenantId"`
	SessionID uuid.UUID         `json:"sessionId"`
	Wait      eventlog.ParkWait `json:"wait"`
}

// Kind implements river.JobArgs.
func (ParkDeadline) Kind() string { return "dshd_park_deadline" }

// InsertOpts implements river.JobArgsWithInsertOpts.
func (ParkDeadline) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueName, MaxAttempts: 25, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// DeadlineFunc runs one deadline job; an error retries it.
type DeadlineFunc func(ctx context.Context, d ParkDeadline) error

// deadlineWorker is the River worker of deadline jobs.
type deadlineWorker struct {
	river.WorkerDefaults[ParkDeadline]
	fn DeadlineFunc
}

// Work implements river.Worker.
func (w *deadlineWorker) Work(ctx context.Context, job *river.Job[ParkDeadline]) error {
	return w.fn(ctx, job.Args)
}

// LeaseDrop gives up owner's lease of the session whatever waits in its inbox (a replica shutting
// down) and, when a message waits (a followup, anything in next-step, or a waking post that set
// run_wake), enqueues the session's wake in the same transaction, so that another replica serves
// it. Dropping a lease one does not hold does nothing.
func (q *Queue) LeaseDrop(ctx context.Context, st *Store, tenantID, sessionID, owner uuid.UUID) error {
	return q.leaseDrop(ctx, st, tenantID, sessionID, owner, false)
}

// LeaseHandOver is LeaseDrop that always enqueues the session's wake: a replica shutting down
// leaves a parked turn that can resume (answered, cancelled or handed over) to another replica.
func (q *Queue) LeaseHandOver(ctx context.Context, st *Store, tenantID, sessionID, owner uuid.UUID) error {
	return q.leaseDrop(ctx, st, tenantID, sessionID, owner, true)
}

func (q *Queue) leaseDrop(ctx context.Context, st *Store, tenantID, sessionID, owner uuid.UUID, always bool) error {
	return st.inTx(ctx, "drop lease", func(tx pgx.Tx) error {
		var waiting bool
		err := tx.QueryRow(ctx, `
			WITH cur AS (
				SELECT c.session_id, $4 OR c.inbox_next_turn > 0 OR c.inbox_next_step > 0 OR c.run_wake AS waiting
				FROM session_counters c JOIN sessions s ON s.id = c.session_id
				WHERE c.session_id = $1 AND s.tenant_id = $2 AND c.run_owner = $3 FOR UPDATE OF c
			), dropped AS (
				UPDATE session_counters c SET run_owner = NULL, run_lease_until = NULL, run_wake = false,
					wake_queued_at = CASE WHEN cur.waiting THEN now() ELSE c.wake_queued_at END
				FROM cur WHERE c.session_id = cur.session_id
				RETURNING c.session_id
			)
			SELECT cur.waiting FROM cur`, sessionID, tenantID, owner, always).Scan(&waiting)
		if errors.Is(err, pgx.ErrNoRows) || err == nil && !waiting {
			return nil
		}
		if err != nil {
			return err
		}
		return q.wakeTx(ctx, tx, Wake{TenantID: tenantID, SessionID: sessionID, Reason: "handoff"})
	})
}
