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
		if d.Attempts != 3 || *d.LastStatus != 502 || *d.LastError != "the endpoint answered HTTP 502" {
			t.Fatalf("failed %+v", d)
		}
	}
}
