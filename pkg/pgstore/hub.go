package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// HubApplicationName is the application_name of the Hub's listener connection (visible in
// pg_stat_activity).
const HubApplicationName = "dshd-eventlog-hub"

// HubConfig configures a Hub. The zero value is valid.
type HubConfig struct {
	// ReconnectDelay is the pause before reconnecting a lost listener connection. Default 1s.
	ReconnectDelay time.Duration
	// Heartbeat, when positive, wakes every subscriber at this interval, so a subscriber re-reads
	// even if a notification was lost (the wake doubles as a poll). Default 0: off.
	Heartbeat time.Duration
	// Logger receives connection losses and reconnects. Default slog.Default().
	Logger *slog.Logger
}

// Hub keeps one LISTEN connection per replica on NotifyChannel and wakes the local subscribers of
// the session named in each notification. A wake is a coalesced signal on a channel with a buffer
// of one: the listener never blocks on a subscriber, and a slow subscriber only misses wakes it
// would have coalesced anyway. Subscribers react to a wake by re-reading the log after the last seq
// they saw. Notifications sent while the listener is reconnecting are lost, so after every
// reconnect the Hub wakes every subscriber.
//
// Start is idempotent and Stop blocks until the listener has exited; a Hub is safe for concurrent
// use.
type Hub struct {
	connConfig *pgx.ConnConfig
	delay      time.Duration
	heartbeat  time.Duration
	logger     *slog.Logger

	mu     sync.Mutex // guards subs, latest and gen; held only to edit or walk them, never during I/O
	subs   map[uuid.UUID]map[*subscription]struct{}
	latest map[uuid.UUID]int64 // highest notified (or observed) seq of subscribed sessions
	// gen counts the times the hub stopped vouching for what it had seen (wakeAll): an Observe of
	// an older generation is ignored.
	gen uint64

	life    sync.Mutex // serializes Start and Stop; guards the fields below
	running bool
	cancel  context.CancelFunc
	done    chan struct{}
}

type subscription struct{ wake chan struct{} }

// NewHub returns a hub whose listener connects with the connection settings of pool (it opens its
// own connection, outside the pool).
func NewHub(pool *pgxpool.Pool, cfg HubConfig) *Hub {
	return newHub(pool.Config().ConnConfig.Copy(), cfg)
}

// NewHubFromURL returns a hub whose listener connects to the database at connString.
func NewHubFromURL(connString string, cfg HubConfig) (*Hub, error) {
	cc, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("eventlog: hub: %w", err)
	}
	return newHub(cc, cfg), nil
}

func newHub(cc *pgx.ConnConfig, cfg HubConfig) *Hub {
	cc.RuntimeParams["application_name"] = HubApplicationName
	h := &Hub{connConfig: cc, delay: cfg.ReconnectDelay, heartbeat: cfg.Heartbeat, logger: cfg.Logger,
		subs: map[uuid.UUID]map[*subscription]struct{}{}, latest: map[uuid.UUID]int64{}}
	if h.delay <= 0 {
		h.delay = time.Second
	}
	if h.logger == nil {
		h.logger = slog.Default()
	}
	return h
}

// Start connects the listener and starts following notifications. It returns once LISTEN is in
// effect (so a commit after Start returns wakes its subscribers), or the connection error. The
// listener runs until Stop or until ctx is cancelled. Calling Start on a running hub does
// nothing.
func (h *Hub) Start(ctx context.Context) error {
	h.life.Lock()
	defer h.life.Unlock()
	if h.running {
		return nil
	}
	conn, err := h.connect(ctx)
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	h.running, h.cancel, h.done = true, cancel, make(chan struct{})
	go h.run(runCtx, conn, h.done)
	return nil
}

// Stop stops the listener and waits for it to exit. Subscriptions stay registered (their channels
// are not closed) and are woken again if the hub is restarted.
func (h *Hub) Stop() {
	h.life.Lock()
	defer h.life.Unlock()
	if !h.running {
		return
	}
	h.running = false
	h.cancel()
	<-h.done
}

// Subscribe registers interest in sessionID. The returned channel receives a value after a commit
// to that session (coalesced: at most one pending wake), after a listener reconnect and at every
// heartbeat. cancel unregisters; it is idempotent. The channel is never closed.
func (h *Hub) Subscribe(sessionID uuid.UUID) (wake <-chan struct{}, cancel func()) {
	sub := &subscription{wake: make(chan struct{}, 1)}
	h.mu.Lock()
	set := h.subs[sessionID]
	if set == nil {
		set = map[*subscription]struct{}{}
		h.subs[sessionID] = set
	}
	set[sub] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	return sub.wake, func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			delete(h.subs[sessionID], sub)
			if len(h.subs[sessionID]) == 0 {
				delete(h.subs, sessionID)
				delete(h.latest, sessionID)
			}
		})
	}
}

func (h *Hub) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, h.connConfig)
	if err != nil {
		return nil, fmt.Errorf("eventlog: hub: connect: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		_ = conn.Close(context.Background())
		return nil, fmt.Errorf("eventlog: hub: listen: %w", err)
	}
	return conn, nil
}

func (h *Hub) run(ctx context.Context, conn *pgx.Conn, done chan struct{}) {
	defer close(done)
	if h.heartbeat > 0 {
		go h.beat(ctx)
	}
	for {
		err := h.listen(ctx, conn)
		_ = conn.Close(context.Background())
		if ctx.Err() != nil {
			return
		}
		h.logger.Warn("eventlog hub: listener connection lost; reconnecting", "error", err, "delay", h.delay)
		if conn = h.reconnect(ctx); conn == nil {
			return
		}
		h.wakeAll() // notifications sent while disconnected are lost: everyone re-reads
	}
}

// listen delivers notifications until the connection fails or ctx ends.
func (h *Hub) listen(ctx context.Context, conn *pgx.Conn) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if id, seq, ok := parsePayload(n.Payload); ok {
			h.wake(id, seq)
		}
	}
}

// reconnect retries until it has a listening connection or ctx ends (then nil).
func (h *Hub) reconnect(ctx context.Context) *pgx.Conn {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(h.delay):
		}
		conn, err := h.connect(ctx)
		if err == nil {
			h.logger.Info("eventlog hub: listener reconnected")
			return conn
		}
		if errors.Is(err, context.Canceled) || ctx.Err() != nil {
			return nil
		}
		h.logger.Warn("eventlog hub: reconnect failed", "error", err)
	}
}

func (h *Hub) beat(ctx context.Context) {
	t := time.NewTicker(h.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.wakeAll()
		}
	}
}

// parsePayload reads "<session id>:<seq>".
func parsePayload(p string) (uuid.UUID, int64, bool) {
	i := strings.LastIndexByte(p, ':')
	if i < 0 {
		return uuid.Nil, 0, false
	}
	id, err := uuid.Parse(p[:i])
	seq, err2 := strconv.ParseInt(p[i+1:], 10, 64)
	return id, seq, err == nil && err2 == nil
}

func (h *Hub) wake(id uuid.UUID, seq int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.subs[id]
	if len(set) == 0 {
		return
	}
	switch {
	case seq < 0: // not an append (a delete): Latest must not vouch that nothing changed
		delete(h.latest, id)
		h.gen++ // nor may an observation made before it
	default:
		if cur, ok := h.latest[id]; !ok || seq > cur {
			h.latest[id] = seq
		}
	}
	for sub := range set {
		signal(sub.wake)
	}
}

// Latest returns the highest seq notified for a session that has subscribers on this hub, and
// false when none was seen since its first subscriber arrived. It can lag a commit by the
// notification's latency.
func (h *Hub) Latest(sessionID uuid.UUID) (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	seq, ok := h.latest[sessionID]
	return seq, ok
}

// Gen returns the hub's current generation, for Observe: take it before the commit to observe
// is sent.
func (h *Hub) Gen() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gen
}

// Observe records a commit this process made to a session, ending at seq, as if its notification
// had arrived: Latest then vouches for it without waiting for the notification, and a follower of
// the session does not read the log to learn what its committer already knows. The caller
// guarantees that the session had a subscriber on this hub since before the commit was sent (so
// every later commit's notification reaches the hub after that subscription), and gen is Gen
// taken before the commit was sent: if the hub stopped vouching since (a reconnect or a
// heartbeat, when notifications may have been lost), the observation is dropped. A session with
// no subscriber now is not recorded.
func (h *Hub) Observe(sessionID uuid.UUID, seq int64, gen uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen != gen || len(h.subs[sessionID]) == 0 {
		return
	}
	if cur, ok := h.latest[sessionID]; !ok || seq > cur {
		h.latest[sessionID] = seq
	}
}

// wakeAll wakes every subscriber (after a reconnect, at a heartbeat) and forgets the latest
// notified seqs: notifications may have been lost, so Latest must not vouch for anything.
func (h *Hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gen++
	clear(h.latest)
	for _, set := range h.subs {
		for sub := range set {
			signal(sub.wake)
		}
	}
}

// signal leaves a wake pending without ever blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
