package worker

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/dshd/dshd/pkg/netguard"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/webhook"
)

// WebhookConfig configures a Deliverer. Store and Sender are required.
type WebhookConfig struct {
	Store  *pgstore.Store
	Sender *webhook.Sender
	// Schedule is the retry schedule. Default webhook.DefaultSchedule.
	Schedule webhook.Schedule
	// Workers bounds the attempts this replica makes at once. Default 16.
	Workers int
	// Poll is how often due deliveries are looked for while there is nothing to do: the longest
	// a new event waits before its first attempt starts. Default 250 ms.
	Poll time.Duration
	// Lease is how long a claimed delivery is this replica's: a replica that dies during an
	// attempt leaves the delivery to another one after it. It must exceed the sender's timeout.
	// Default 40 s.
	Lease time.Duration
	// Retention is how long delivered and failed deliveries stay in the delivery log, and how
	// long a delivery may stay pending before it fails. Default 7 days.
	Retention time.Duration
	// EndpointConcurrency bounds the attempts in flight to one endpoint, across replicas, so an
	// endpoint that hangs holds that many workers, not all of them. Default 2.
	EndpointConcurrency int
	// EndpointFailures is how many failed attempts in a row back an endpoint off: its deliveries
	// then wait as a failed attempt does (the schedule's doubling waits, from the first), and
	// each further failure of an attempt made after the backoff backs it off longer; a success
	// ends it. Default 5.
	EndpointFailures int
	// ExpireBatch bounds the rows one retention pass changes; passes repeat until one changes
	// fewer. Default 10000.
	ExpireBatch int
	Logger      *slog.Logger
}

func (c *WebhookConfig) defaults() {
	if c.Schedule.Attempts <= 0 {
		c.Schedule = webhook.DefaultSchedule
	}
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if c.Poll <= 0 {
		c.Poll = 250 * time.Millisecond
	}
	if c.Lease <= 0 {
		c.Lease = 40 * time.Second
	}
	if c.Retention <= 0 {
		c.Retention = 7 * 24 * time.Hour
	}
	if c.EndpointConcurrency <= 0 {
		c.EndpointConcurrency = 2
	}
	if c.EndpointFailures <= 0 {
		c.EndpointFailures = 5
	}
	if c.ExpireBatch <= 0 {
		c.ExpireBatch = 10000
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// endpointBackoff returns how long an endpoint with failures failed attempts in a row (this one
// included) is backed off: 0 below the bound, then the schedule's waits from the first.
func (c *WebhookConfig) endpointBackoff(failures int) time.Duration {
	if failures < c.EndpointFailures {
		return 0
	}
	unbounded := webhook.Schedule{Base: c.Schedule.Base, Max: c.Schedule.Max, Attempts: math.MaxInt}
	wait, _ := unbounded.Next(failures - c.EndpointFailures + 1)
	return wait
}

// Deliverer drains the webhook outbox on this replica (docs/webhooks.md): it claims due
// deliveries (pgstore.Webhooks.WebhookClaim, which every replica may run at once), at most
// EndpointConcurrency in flight per endpoint, attempts each with the Sender, at most Workers at a
// time, and records the outcome: delivered on a 2xx answer, otherwise due again after the
// schedule's wait, or failed after its last attempt; an endpoint that failed EndpointFailures
// times in a row is backed off. A delivery is a row, so it survives restarts; one whose attempt
// never recorded (the replica died) is claimed again after Lease. Deliveries are therefore at
// least once, each with its event's stable webhook-id. Every ten minutes it applies the
// retention (Expire).
type Deliverer struct {
	cfg    WebhookConfig
	hooks  *pgstore.Webhooks
	slots  chan struct{} // one per attempt in flight
	freed  chan struct{} // a slot was given back (wakes a full loop)
	cancel context.CancelFunc
	abort  context.CancelFunc // cancels attempts in flight (Stop's deadline passed)
	done   chan struct{}
	wg     sync.WaitGroup
	warned time.Time // the last claim failure logged (the loop's own)
}

// NewDeliverer returns a Deliverer; nothing runs until Start.
func NewDeliverer(cfg WebhookConfig) *Deliverer {
	cfg.defaults()
	return &Deliverer{cfg: cfg, hooks: cfg.Store.Webhooks(), slots: make(chan struct{}, cfg.Workers),
		freed: make(chan struct{}, 1)}
}

// Start starts the delivery loop.
func (d *Deliverer) Start(ctx context.Context) {
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	actx, abort := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel, d.abort, d.done = cancel, abort, make(chan struct{})
	go func() {
		defer close(d.done)
		d.loop(lctx, actx)
	}()
}

// Stop stops claiming, and waits for the attempts in flight until ctx ends; then it cancels
// them (they are attempted again after their lease, by any replica).
func (d *Deliverer) Stop(ctx context.Context) error {
	if d.cancel == nil {
		return nil
	}
	d.cancel()
	<-d.done
	finished := make(chan struct{})
	go func() { d.wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-ctx.Done():
		d.abort()
		<-finished
	}
	d.abort()
	return nil
}

func (d *Deliverer) loop(ctx, attemptCtx context.Context) {
	poll := time.NewTimer(0)
	defer poll.Stop()
	expire := time.NewTicker(10 * time.Minute)
	defer expire.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-expire.C:
			if _, err := d.Expire(ctx); err != nil && ctx.Err() == nil {
				d.cfg.Logger.Warn("webhook delivery log expiry failed", "err", err)
			}
			continue
		case <-d.freed:
		case <-poll.C:
		}
		more := d.claim(ctx, attemptCtx)
		wait := d.cfg.Poll
		if more {
			wait = 0
		}
		poll.Reset(wait)
	}
}

// Expire applies the retention: deliveries pending for longer than Retention fail, and delivered
// and failed ones that settled longer than Retention ago are deleted, in passes of ExpireBatch
// rows repeated until a pass changes fewer, so the outbox keeps up with any rate of events. It
// returns how many deliveries it deleted.
func (d *Deliverer) Expire(ctx context.Context) (int64, error) {
	for {
		n, err := d.hooks.WebhookAbandon(ctx, d.cfg.Retention, d.cfg.ExpireBatch)
		if err != nil {
			return 0, err
		}
		if n < int64(d.cfg.ExpireBatch) {
			break
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
	}
	var deleted int64
	for {
		n, err := d.hooks.WebhookExpire(ctx, d.cfg.Retention, d.cfg.ExpireBatch)
		deleted += n
		if err != nil || n < int64(d.cfg.ExpireBatch) {
			return deleted, err
		}
		if err := ctx.Err(); err != nil {
			return deleted, err
		}
	}
}

// claim claims as many due deliveries as there are free slots and starts their attempts. It
// reports whether there may be more due at once (it filled every free slot).
func (d *Deliverer) claim(ctx, attemptCtx context.Context) bool {
	free := cap(d.slots) - len(d.slots)
	if free == 0 {
		return false // a freed slot wakes the loop
	}
	claimed, err := d.hooks.WebhookClaim(ctx, free, d.cfg.Lease, d.cfg.Schedule.Attempts, d.cfg.EndpointConcurrency)
	if err != nil {
		// The database is away (an outage): say so once in a while, not at every poll.
		if ctx.Err() == nil && time.Since(d.warned) > 30*time.Second {
			d.warned = time.Now()
			d.cfg.Logger.Warn("webhook claim failed; deliveries wait until the database answers", "err", err)
		}
		return false
	}
	for _, a := range claimed {
		d.slots <- struct{}{}
		d.wg.Add(1)
		go func() {
			defer func() {
				<-d.slots
				d.wg.Done()
				select {
				case d.freed <- struct{}{}:
				default:
				}
			}()
			d.attempt(attemptCtx, a)
		}()
	}
	return len(claimed) == free
}

// attempt sends one claimed delivery and records what became of it.
func (d *Deliverer) attempt(ctx context.Context, a pgstore.WebhookAttempt) {
	var res webhook.Result
	switch {
	case a.Disabled:
		res = webhook.Result{Err: "the endpoint was disabled"}
	case a.SecretErr != nil:
		res = webhook.Result{Err: "not sent: the endpoint's signing secret does not decrypt with the server's keys"}
	default:
		res = d.cfg.Sender.Send(ctx, a.URL, a.Secret, a.EventID, a.Body)
	}
	if ctx.Err() != nil {
		return // stopping: the lease runs out and the delivery is attempted again
	}
	o := pgstore.WebhookOutcome{Status: res.Status, Error: netguard.Clip(res.Err, webhook.MaxErrorBytes), Delivered: res.OK()}
	if !o.Delivered {
		wait, again := d.cfg.Schedule.Next(a.Attempt)
		o.RetryIn, o.GiveUp = wait, !again || a.Disabled
		if !a.Disabled {
			o.EndpointBackoff = d.cfg.endpointBackoff(a.EndpointFailures + 1)
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	recorded, err := d.hooks.WebhookRecord(rctx, a, o)
	log := d.cfg.Logger.With("delivery", a.ID, "tenant", a.TenantID, "event", a.EventType, "attempt", a.Attempt)
	switch {
	case err != nil:
		log.Warn("webhook outcome not recorded: the delivery is attempted again after its lease", "err", err)
	case !recorded:
		log.Info("webhook outcome not recorded: the delivery was claimed again or is gone")
	case !o.Delivered:
		log.Info("webhook attempt failed", "status", res.Status, "error", res.Err, "giveUp", o.GiveUp,
			"endpointBackoff", o.EndpointBackoff)
	}
}
