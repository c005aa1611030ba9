package worker_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/webhook"
	"github.com/dshd/dshd/pkg/worker"
)

// flakyReceiver answers 500 to the first delivery of each webhook-id and 204 to the next ones,
// counting the accepted deliveries whose signature verifies.
type flakyReceiver struct {
	secret   string
	mu       sync.Mutex
	seen     map[string]int // attempts per webhook-id
	accepted map[string]int
	bad      int // deliveries whose signature did not verify
}

func (f *flakyReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := webhook.Verify(f.secret, r.Header, body, time.Now(), webhook.DefaultTolerance); err != nil {
		f.bad++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	id := r.Header.Get(webhook.HeaderID)
	f.seen[id]++
	if f.seen[id] == 1 {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	f.accepted[id]++
	w.WriteHeader(http.StatusNoContent)
}

// TestDeliverersRetryUntilAccepted: two replicas' deliverers drain one outbox; every event is
// attempted twice (the receiver refuses the first) and accepted once, signed; the delivery log
// shows two attempts and the 204. A receiver that never accepts leaves failed deliveries after
// the schedule's last attempt.
func TestDeliverersRetryUntilAccepted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	hooks := e.store.Webhooks()
	key := webhook.NewSecret()
	rc := &flakyReceiver{secret: webhook.FormatSecret(key), seen: map[string]int{}, accepted: map[string]int{}}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	ep, err := hooks.WebhookCreate(ctx, e.tenant, srv.URL+"/hook", []string{pgstore.WebhookTurnCompleted}, "", key, 5)
	if err != nil {
		t.Fatal(err)
	}
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) }))
	t.Cleanup(dead.Close)
	deadEp, err := hooks.WebhookCreate(ctx, e.tenant, dead.URL, []string{pgstore.WebhookTurnCompleted}, "", key, 5)
	if err != nil {
		t.Fatal(err)
	}
	sender := webhook.NewSender(webhook.SenderConfig{AllowHTTP: true, AllowPrivate: true, Timeout: 5 * time.Second})
	for range 2 {
		d := worker.NewDeliverer(worker.WebhookConfig{Store: e.store, Sender: sender, Workers: 4, Poll: 20 * time.Millisecond,
			Schedule: webhook.Schedule{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond, Attempts: 3},
			Logger:   slog.New(slog.NewTextHandler(io.Discard, nil))})
		d.Start(ctx)
		t.Cleanup(func() { _ = d.Stop(ctx) })
	}
	const turns = 12
	sess := e.session()
	for n := 1; n <= turns; n++ {
		if _, err := e.store.Journal(nil, e.tenant, sess, uuid.Nil).Append(ctx, eventlog.Batch(
			eventlog.NewEvent{Type: "turn/start", Data: map[string]int{"turn": n}},
			eventlog.NewEvent{Type: "turn/end", Data: map[string]any{"turn": n, "reason": map[string]string{"kind": "completed"}}})); err != nil {
			t.Fatal(err)
		}
	}
	settled := func(id uuid.UUID, status string) bool {
		items, _, err := hooks.WebhookDeliveries(ctx, e.tenant, id, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range items {
			if d.Status != status {
				return false
			}
		}
		return len(items) == turns
	}
	eventually(t, 30*time.Second, func() bool {
		return settled(ep.ID, pgstore.DeliveryDelivered) && settled(deadEp.ID, pgstore.DeliveryFailed)
	})
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.accepted) != turns || rc.bad != 0 {
		t.Fatalf("accepted %d events (want %d), %d bad signatures", len(rc.accepted), turns, rc.bad)
	}
	for id, n := range rc.accepted {
		if n != 1 || rc.seen[id] != 2 {
			t.Fatalf("%s: accepted %d times after %d attempts", id, n, rc.seen[id])
		}
	}
	items, _, _ := hooks.WebhookDeliveries(ctx, e.tenant, ep.ID, "", 100)
	for _, d := range items {
		if d.Attempts != 2 || d.LastStatus == nil || *d.LastStatus != 204 || d.LastError != nil {
			t.Fatalf("delivered %+v", d)
		}
	}
	items, _, _ = hooks.WebhookDeliveries(ctx, e.tenant, deadEp.ID, "", 100)
	for _, d := range items {
		if d.Attempts != 3 || d.LastStatus == nil || *d.LastStatus != 502 || d.LastError == nil || *d.LastError != "the endpoint answered HTTP 502" {
			t.Fatalf("failed %+v", d)
		}
	}
}

// endTurns appends n whole turns to the tenant's session: one turn.completed each.
func endTurns(t *testing.T, e *env, tenant, sess uuid.UUID, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		if _, err := e.store.Journal(nil, tenant, sess, uuid.Nil).Append(context.Background(), eventlog.Batch(
			eventlog.NewEvent{Type: "turn/start", Data: map[string]int{"turn": i}},
			eventlog.NewEvent{Type: "turn/end", Data: map[string]any{"turn": i, "reason": map[string]string{"kind": "completed"}}})); err != nil {
			t.Fatal(err)
		}
	}
}

// hangingReceiver holds every request until released (or the request ends), counting those in
// flight and the most at once.
type hangingReceiver struct {
	release        chan struct{}
	mu             sync.Mutex
	inFlight, most int
	requests       int
}

func (h *hangingReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.requests++
	h.inFlight++
	h.most = max(h.most, h.inFlight)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.inFlight--
		h.mu.Unlock()
	}()
	select {
	case <-h.release:
	case <-r.Context().Done():
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *hangingReceiver) state() (inFlight, most, requests int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inFlight, h.most, h.requests
}

// TestHangingEndpointDoesNotDelayAnotherTenant: a tenant's endpoint that never answers (within a
// timeout far longer than the test) has many older deliveries queued; with two workers, it holds
// one of them (the bound per endpoint), and another tenant's delivery is delivered while the
// hanging attempt is still under way.
func TestHangingEndpointDoesNotDelayAnotherTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	hooks := e.store.Webhooks()
	key := webhook.NewSecret()
	hang := &hangingReceiver{release: make(chan struct{})}
	hangSrv := httptest.NewServer(hang)
	t.Cleanup(hangSrv.Close)
	if _, err := hooks.WebhookCreate(ctx, e.tenant, hangSrv.URL, []string{pgstore.WebhookTurnCompleted}, "", key, 5); err != nil {
		t.Fatal(err)
	}
	var okHits sync.WaitGroup
	okHits.Add(1)
	var once sync.Once
	okSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(okHits.Done)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(okSrv.Close)
	other, otherSess := e.otherTenant()
	okEp, err := hooks.WebhookCreate(ctx, other, okSrv.URL, []string{pgstore.WebhookTurnCompleted}, "", key, 5)
	if err != nil {
		t.Fatal(err)
	}
	endTurns(t, e, e.tenant, e.session(), 10) // the hanging endpoint's, older
	endTurns(t, e, other, otherSess, 1)

	sender := webhook.NewSender(webhook.SenderConfig{AllowHTTP: true, AllowPrivate: true, Timeout: 10 * time.Minute})
	d := worker.NewDeliverer(worker.WebhookConfig{Store: e.store, Sender: sender, Workers: 2, EndpointConcurrency: 1,
		Poll: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	d.Start(ctx)
	t.Cleanup(func() { _ = d.Stop(ctx) })
	t.Cleanup(func() { close(hang.release) }) // runs first: the hanging attempt ends, Stop returns

	eventually(t, 30*time.Second, func() bool {
		items, _, err := hooks.WebhookDeliveries(ctx, other, okEp.ID, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		return len(items) == 1 && items[0].Status == pgstore.DeliveryDelivered
	})
	inFlight, most, requests := hang.state()
	if inFlight != 1 || most != 1 || requests != 1 {
		t.Fatalf("the hanging endpoint: %d in flight, at most %d, %d requests; want 1, 1, 1", inFlight, most, requests)
	}
}

// TestFailingEndpointIsBackedOff: after EndpointFailures failed attempts in a row, an endpoint's
// other deliveries are not attempted: they wait for the endpoint's backoff, without an attempt
// counted, and the endpoint sees no more requests meanwhile.
func TestFailingEndpointIsBackedOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	hooks := e.store.Webhooks()
	var mu sync.Mutex
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	ep, err := hooks.WebhookCreate(ctx, e.tenant, srv.URL, []string{pgstore.WebhookTurnCompleted}, "", webhook.NewSecret(), 5)
	if err != nil {
		t.Fatal(err)
	}
	endTurns(t, e, e.tenant, e.session(), 6)
	sender := webhook.NewSender(webhook.SenderConfig{AllowHTTP: true, AllowPrivate: true, Timeout: 5 * time.Second})
	d := worker.NewDeliverer(worker.WebhookConfig{Store: e.store, Sender: sender, Workers: 4, EndpointConcurrency: 1,
		EndpointFailures: 2, Poll: 20 * time.Millisecond,
		Schedule: webhook.Schedule{Base: time.Hour, Max: time.Hour, Attempts: 5},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil))})
	d.Start(ctx)
	t.Cleanup(func() { _ = d.Stop(ctx) })

	// Two deliveries failed once each (each waits its hour); the four others were never
	// attempted and wait for the endpoint's backoff (at least half an hour).
	eventually(t, 30*time.Second, func() bool {
		attempted, waiting := 0, 0
		for _, dl := range deliveryLogOf(t, hooks, e.tenant, ep.ID) {
			switch {
			case dl.Status != pgstore.DeliveryPending:
				t.Fatalf("a delivery settled: %+v", dl)
			case dl.Attempts == 1 && dl.LastStatus != nil && *dl.LastStatus == 503: // claimed and recorded (a claim counts the attempt first)
				attempted++
			case dl.Attempts == 0 && time.Until(*dl.NextAttemptAt) > 25*time.Minute:
				waiting++
			}
		}
		return attempted == 2 && waiting == 4
	})
	mu.Lock()
	defer mu.Unlock()
	if hits != 2 {
		t.Fatalf("the endpoint saw %d requests, want 2", hits)
	}
}

func deliveryLogOf(t *testing.T, hooks *pgstore.Webhooks, tenant, endpoint uuid.UUID) []pgstore.WebhookDelivery {
	t.Helper()
	items, _, err := hooks.WebhookDeliveries(context.Background(), tenant, endpoint, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	return items
}

// TestExpireRepeatsUntilCaughtUp: one retention run deletes every settled delivery older than
// the retention, however many more than a pass's batch, fails pending ones older than it, and
// keeps the rest.
func TestExpireRepeatsUntilCaughtUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	hooks := e.store.Webhooks()
	ep, err := hooks.WebhookCreate(ctx, e.tenant, "https://hooks.example.com/h", []string{pgstore.WebhookTurnCompleted}, "", webhook.NewSecret(), 5)
	if err != nil {
		t.Fatal(err)
	}
	endTurns(t, e, e.tenant, e.session(), 12)
	// 10 delivered two hours ago, 1 pending for two hours, the newest pending now.
	if _, err := e.pool.Exec(ctx, `WITH r AS (
			SELECT id, row_number() OVER (ORDER BY created_at DESC, id) AS n FROM webhook_deliveries)
		UPDATE webhook_deliveries d SET created_at = now() - interval '2 hours',
			delivered_at = CASE WHEN r.n > 2 THEN now() - interval '2 hours' END
		FROM r WHERE r.id = d.id AND r.n > 1`); err != nil {
		t.Fatal(err)
	}
	d := worker.NewDeliverer(worker.WebhookConfig{Store: e.store, Sender: webhook.NewSender(webhook.SenderConfig{}),
		Retention: time.Hour, ExpireBatch: 3})
	n, err := d.Expire(ctx)
	if err != nil || n != 10 {
		t.Fatalf("expired %d (%v), want 10", n, err)
	}
	left := deliveryLogOf(t, hooks, e.tenant, ep.ID)
	if len(left) != 2 || left[0].Status != pgstore.DeliveryPending || left[1].Status != pgstore.DeliveryFailed {
		t.Fatalf("left %+v", left)
	}
}
