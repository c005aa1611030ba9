package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/pgstore"
)

// endedTurn appends a whole turn n to the session: one turn.completed for every subscribed
// endpoint.
// newHookEndpoint is a store of a fresh tenant with one endpoint subscribed to every event.
func newHookEndpoint(t *testing.T) (context.Context, *pgstore.Store, *pgxpool.Pool, uuid.UUID, *pgstore.Webhooks, pgstore.WebhookEndpoint) {
	t.Helper()
	ctx := context.Background()
	st, pool, tenant := newStore(t, pgstore.StoreConfig{})
	w := st.Webhooks()
	ep, err := w.WebhookCreate(ctx, tenant, "https://hooks.example.com/a", pgstore.WebhookEventTypes, "", []byte("k"), 5)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, st, pool, tenant, w, ep
}

func endedTurn(t *testing.T, st *pgstore.Store, tenant, session uuid.UUID, n int) {
	t.Helper()
	if _, err := appendEvents(st, context.Background(), tenant, session, turnStartEv(n),
		eventlog.NewEvent{Type: "turn/end", Data: map[string]any{"turn": n, "reason": map[string]string{"kind": "completed"}}}); err != nil {
		t.Fatal(err)
	}
}

func deliveryLog(t *testing.T, w *pgstore.Webhooks, tenant, endpoint uuid.UUID) []pgstore.WebhookDelivery {
	t.Helper()
	items, _, err := w.WebhookDeliveries(context.Background(), tenant, endpoint, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	return items
}

// TestWebhookClaimRetryAndDeliver: a claim leases a due delivery (a second claim skips it) with
// its body and secret; a failed attempt is due again after its wait with its status and error
// logged; the record of an attempt whose lease ran out (claimed again) is refused; a success
// ends the delivery, which no claim returns again.
func TestWebhookClaimRetryAndDeliver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tenant := newStore(t, pgstore.StoreConfig{})
	w := st.Webhooks()
	secret := []byte("0123456789abcdef0123456789abcdef")
	ep, err := w.WebhookCreate(ctx, tenant, "https://hooks.example.com/a", []string{pgstore.WebhookTurnCompleted}, "d", secret, 5)
	if err != nil {
		t.Fatal(err)
	}
	sess := newSession(t, st, tenant)
	endedTurn(t, st, tenant, sess.ID, 1)

	claimed, err := w.WebhookClaim(ctx, 10, time.Minute, 3, 1)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v %v", claimed, err)
	}
	a := claimed[0]
	if a.Attempt != 1 || a.URL != ep.URL || string(a.Secret) != string(secret) || a.EventType != pgstore.WebhookTurnCompleted ||
		a.EventID != sess.ID.String()+":1:turn.completed" || a.TenantID != tenant || a.Disabled {
		t.Fatalf("claimed %+v", a)
	}
	var body pgstore.WebhookEvent
	if err := json.Unmarshal(a.Body, &body); err != nil || body.ID != a.EventID || body.Type != a.EventType {
		t.Fatalf("body %s: %v", a.Body, err)
	}
	if again, err := w.WebhookClaim(ctx, 10, time.Minute, 3, 1); err != nil || len(again) != 0 {
		t.Fatalf("a leased delivery was claimed again: %v %v", again, err)
	}

	// The attempt fails with a 500: due again after its wait (an hour here), logged.
	if ok, err := w.WebhookRecord(ctx, a, pgstore.WebhookOutcome{Status: 500, Error: "the endpoint answered HTTP 500", RetryIn: time.Hour}); err != nil || !ok {
		t.Fatalf("record: %v %v", ok, err)
	}
	log := deliveryLog(t, w, tenant, ep.ID)
	if len(log) != 1 || log[0].Status != pgstore.DeliveryPending || log[0].Attempts != 1 || *log[0].LastStatus != 500 ||
		*log[0].LastError != "the endpoint answered HTTP 500" || log[0].NextAttemptAt == nil || log[0].DeliveredAt != nil {
		t.Fatalf("log %+v", log)
	}
	if wait := time.Until(*log[0].NextAttemptAt); wait < 50*time.Minute || wait > 70*time.Minute {
		t.Fatalf("next attempt in %v, want an hour", wait)
	}
	if again, err := w.WebhookClaim(ctx, 10, time.Minute, 3, 1); err != nil || len(again) != 0 {
		t.Fatalf("a delivery waiting for its retry was claimed: %v %v", again, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET next_attempt_at = now()`); err != nil { // the hour passes
		t.Fatal(err)
	}
	claimed, err = w.WebhookClaim(ctx, 10, time.Minute, 3, 1)
	if err != nil || len(claimed) != 1 || claimed[0].Attempt != 2 {
		t.Fatalf("second claim: %+v %v", claimed, err)
	}
	// The first attempt's record comes late: refused, the second attempt owns the delivery.
	if ok, err := w.WebhookRecord(ctx, a, pgstore.WebhookOutcome{Status: 200, Delivered: true}); err != nil || ok {
		t.Fatalf("a stale record was taken: %v %v", ok, err)
	}
	if ok, err := w.WebhookRecord(ctx, claimed[0], pgstore.WebhookOutcome{Status: 204, Delivered: true}); err != nil || !ok {
		t.Fatalf("record: %v %v", ok, err)
	}
	log = deliveryLog(t, w, tenant, ep.ID)
	if d := log[0]; d.Status != pgstore.DeliveryDelivered || d.Attempts != 2 || *d.LastStatus != 204 || d.LastError != nil ||
		d.DeliveredAt == nil || d.NextAttemptAt != nil {
		t.Fatalf("delivered %+v", d)
	}
	if again, err := w.WebhookClaim(ctx, 10, 0, 3, 1); err != nil || len(again) != 0 {
		t.Fatalf("a delivered delivery was claimed: %v %v", again, err)
	}
	// A delivered one may be delivered again on request, with a fresh schedule.
	d, err := w.WebhookRedeliver(ctx, tenant, ep.ID, log[0].ID)
	if err != nil || d.Status != pgstore.DeliveryPending || d.Attempts != 0 {
		t.Fatalf("redeliver: %+v %v", d, err)
	}
	if _, err := w.WebhookRedeliver(ctx, tenant, ep.ID, log[0].ID); !errors.Is(err, pgstore.ErrDeliveryPending) {
		t.Fatalf("redeliver a pending delivery: %v", err)
	}
	if claimed, err = w.WebhookClaim(ctx, 10, time.Minute, 3, 1); err != nil || len(claimed) != 1 || claimed[0].Attempt != 1 {
		t.Fatalf("claim after redeliver: %+v %v", claimed, err)
	}
}

// TestWebhookGivesUp: a delivery fails after its last attempt (GiveUp), and one whose last
// attempt never recorded (its replica died: the lease ran out) fails at the next claim instead
// of being attempted once more. A failed one may be redelivered.
func TestWebhookGivesUp(t *testing.T) {
	t.Parallel()
	ctx, st, _, tenant, w, ep := newHookEndpoint(t)
	sess := newSession(t, st, tenant)
	endedTurn(t, st, tenant, sess.ID, 1)
	c, err := w.WebhookClaim(ctx, 10, 0, 2, 1) // a zero lease: as if the replica died at once
	if err != nil || len(c) != 1 || c[0].Attempt != 1 {
		t.Fatalf("claim: %+v %v", c, err)
	}
	if c, err = w.WebhookClaim(ctx, 10, 0, 2, 1); err != nil || len(c) != 1 || c[0].Attempt != 2 {
		t.Fatalf("claim after the lease: %+v %v", c, err)
	}
	if c, err = w.WebhookClaim(ctx, 10, 0, 2, 1); err != nil || len(c) != 0 {
		t.Fatalf("a third attempt of two: %+v %v", c, err)
	}
	log := deliveryLog(t, w, tenant, ep.ID)
	if d := log[0]; d.Status != pgstore.DeliveryFailed || d.Attempts != 2 || d.FailedAt == nil || *d.LastError != "gave up: the last attempt did not finish" {
		t.Fatalf("log %+v", d)
	}

	endedTurn(t, st, tenant, sess.ID, 2)
	c, err = w.WebhookClaim(ctx, 10, time.Minute, 2, 1)
	if err != nil || len(c) != 1 {
		t.Fatalf("claim: %+v %v", c, err)
	}
	if ok, err := w.WebhookRecord(ctx, c[0], pgstore.WebhookOutcome{Error: "the request failed: connection refused", GiveUp: true}); err != nil || !ok {
		t.Fatalf("record: %v %v", ok, err)
	}
	log = deliveryLog(t, w, tenant, ep.ID)
	if d := log[0]; d.EventID != sess.ID.String()+":3:turn.completed" || d.Status != pgstore.DeliveryFailed || d.LastStatus != nil {
		t.Fatalf("newest first, failed: %+v", d)
	}
	if d, err := w.WebhookRedeliver(ctx, tenant, ep.ID, log[0].ID); err != nil || d.Status != pgstore.DeliveryPending {
		t.Fatalf("redeliver a failed one: %+v %v", d, err)
	}
}

// TestWebhookConcurrentClaimsShareNothing: replicas claiming at once get each due delivery once.
func TestWebhookConcurrentClaimsShareNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, tenant := newStore(t, pgstore.StoreConfig{})
	w := st.Webhooks()
	for i := range 4 {
		if _, err := w.WebhookCreate(ctx, tenant, "https://hooks.example.com/"+string(rune('a'+i)), pgstore.WebhookEventTypes, "", []byte("k"), 5); err != nil {
			t.Fatal(err)
		}
	}
	sess := newSession(t, st, tenant)
	for n := 1; n <= 10; n++ {
		endedTurn(t, st, tenant, sess.ID, n)
	}
	var mu sync.Mutex
	seen := map[uuid.UUID]int{}
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for {
				c, err := w.WebhookClaim(ctx, 3, time.Minute, 5, 100)
				if err != nil {
					t.Error(err)
					return
				}
				if len(c) == 0 {
					return
				}
				mu.Lock()
				for _, a := range c {
					seen[a.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != 40 {
		t.Fatalf("%d deliveries claimed, want 40", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("delivery %s claimed %d times", id, n)
		}
	}
}

// TestWebhookEndpoints: the bound on endpoints holds under concurrent creations; endpoints are
// the tenant's only; an update changes what it sets and disabling gives up pending deliveries;
// the delivery log pages by cursor; a delete removes the endpoint and its log.
func TestWebhookEndpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tenant := newStore(t, pgstore.StoreConfig{})
	other := newTenant(t, pool)
	w := st.Webhooks()
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, refused := 0, 0
	for range 8 {
		wg.Go(func() {
			_, err := w.WebhookCreate(ctx, tenant, "https://hooks.example.com/x", []string{pgstore.WebhookSessionIdle}, "", []byte("k"), 3)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case fault.Code(err) == fault.TooManyWebhooks:
				refused++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if created != 3 || refused != 5 {
		t.Fatalf("created %d, refused %d; want 3 and 5", created, refused)
	}
	list, next, err := w.WebhookList(ctx, tenant, "", 2)
	if err != nil || len(list) != 2 || next == "" {
		t.Fatalf("list: %d %q %v", len(list), next, err)
	}
	rest, next2, err := w.WebhookList(ctx, tenant, next, 2)
	if err != nil || len(rest) != 1 || next2 != "" || rest[0].ID == list[0].ID || rest[0].ID == list[1].ID {
		t.Fatalf("second page: %+v %q %v", rest, next2, err)
	}
	if l, _, err := w.WebhookList(ctx, other, "", 10); err != nil || len(l) != 0 {
		t.Fatalf("the other tenant sees %d endpoints (%v)", len(l), err)
	}
	ep := list[0]
	if _, err := w.WebhookGet(ctx, other, ep.ID); !errors.Is(err, pgstore.ErrWebhookNotFound) {
		t.Fatalf("another tenant's endpoint: %v", err)
	}
	if _, _, err := w.WebhookDeliveries(ctx, other, ep.ID, "", 10); !errors.Is(err, pgstore.ErrWebhookNotFound) {
		t.Fatalf("another tenant's delivery log: %v", err)
	}
	if _, err := w.WebhookUpdate(ctx, other, ep.ID, pgstore.WebhookPatch{Disabled: ptr(true)}); !errors.Is(err, pgstore.ErrWebhookNotFound) {
		t.Fatalf("another tenant's update: %v", err)
	}
	if err := w.WebhookDelete(ctx, other, ep.ID); !errors.Is(err, pgstore.ErrWebhookNotFound) {
		t.Fatalf("another tenant's delete: %v", err)
	}

	// Three sessions go idle: three pending deliveries of each endpoint; the log pages.
	for range 3 {
		sess := newSession(t, st, tenant)
		owner := uuid.New()
		if ok, _, err := st.LeaseAcquire(ctx, tenant, sess.ID, owner, time.Minute); err != nil || !ok {
			t.Fatalf("acquire: %v %v", ok, err)
		}
		if released, err := st.LeaseRelease(ctx, tenant, sess.ID, owner); err != nil || !released {
			t.Fatalf("release: %v %v", released, err)
		}
	}
	page1, cur, err := w.WebhookDeliveries(ctx, tenant, ep.ID, "", 2)
	if err != nil || len(page1) != 2 || cur == "" {
		t.Fatalf("page 1: %d %q %v", len(page1), cur, err)
	}
	page2, cur2, err := w.WebhookDeliveries(ctx, tenant, ep.ID, cur, 2)
	if err != nil || len(page2) != 1 || cur2 != "" || page2[0].ID == page1[0].ID || page2[0].ID == page1[1].ID ||
		page2[0].EventType != pgstore.WebhookSessionIdle {
		t.Fatalf("page 2: %+v %q %v", page2, cur2, err)
	}
	if _, _, err := w.WebhookDeliveries(ctx, tenant, ep.ID, "nope", 2); fault.Code(err) != fault.Invalid {
		t.Fatalf("a bad cursor: %v", err)
	}

	url, desc := "https://other.example.com/y", "renamed"
	up, err := w.WebhookUpdate(ctx, tenant, ep.ID, pgstore.WebhookPatch{URL: &url, Description: &desc, Disabled: ptr(true)})
	if err != nil || up.URL != url || up.Description != desc || up.DisabledAt == nil || len(up.Events) != 1 {
		t.Fatalf("update: %+v %v", up, err)
	}
	for _, d := range deliveryLog(t, w, tenant, ep.ID) {
		if d.Status != pgstore.DeliveryFailed || *d.LastError != "the endpoint was disabled" {
			t.Fatalf("a disabled endpoint's delivery %+v", d)
		}
	}
	up, err = w.WebhookUpdate(ctx, tenant, ep.ID, pgstore.WebhookPatch{Events: pgstore.WebhookEventTypes, Disabled: ptr(false)})
	if err != nil || up.DisabledAt != nil || len(up.Events) != 4 || up.URL != url {
		t.Fatalf("enable: %+v %v", up, err)
	}
	if err := w.WebhookDelete(ctx, tenant, ep.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.WebhookDeliveries(ctx, tenant, ep.ID, "", 2); !errors.Is(err, pgstore.ErrWebhookNotFound) {
		t.Fatalf("a deleted endpoint's log: %v", err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, ep.ID).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d deliveries left (%v)", left, err)
	}
}

// TestWebhookExpire: delivered and failed deliveries older than the retention go; pending ones
// stay whatever their age.
func TestWebhookExpire(t *testing.T) {
	t.Parallel()
	ctx, st, pool, tenant, w, ep := newHookEndpoint(t)
	sess := newSession(t, st, tenant)
	for n := 1; n <= 3; n++ {
		endedTurn(t, st, tenant, sess.ID, n)
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET delivered_at = now() - interval '2 hours'
		WHERE event_id LIKE '%:1:%'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET failed_at = now() - interval '2 hours'
		WHERE event_id LIKE '%:3:%'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET created_at = now() - interval '3 hours'`); err != nil {
		t.Fatal(err)
	}
	n, err := w.WebhookExpire(ctx, time.Hour, 100)
	if err != nil || n != 2 {
		t.Fatalf("expired %d (%v), want 2", n, err)
	}
	if log := deliveryLog(t, w, tenant, ep.ID); len(log) != 1 || log[0].Status != pgstore.DeliveryPending {
		t.Fatalf("left %+v", log)
	}
}
