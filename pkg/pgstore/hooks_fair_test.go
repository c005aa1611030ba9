package pgstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
)

// queueDeliveries inserts n due deliveries of the endpoint, the first the oldest due (a second
// apart), and returns their ids in that order.
func queueDeliveries(t *testing.T, pool *pgxpool.Pool, tenant, endpoint uuid.UUID, n int) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.New()
		if _, err := pool.Exec(context.Background(), `INSERT INTO webhook_deliveries
			(id, endpoint_id, tenant_id, event_id, event_type, payload, next_attempt_at)
			VALUES ($1, $2, $3, $4, 'turn.completed', '{}', now() - ($5::int - $6::int) * interval '1 second')`,
			ids[i], endpoint, tenant, ids[i].String(), n, i); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

func claimedEndpoints(c []pgstore.WebhookAttempt) map[uuid.UUID]int {
	out := map[uuid.UUID]int{}
	for _, a := range c {
		out[a.EndpointID]++
	}
	return out
}

// TestWebhookClaimIsFairBetweenEndpoints: an endpoint with a long queue of older deliveries does
// not take every slot of a claim: at most perEndpoint of its deliveries are in flight, counting
// those claimed before (on any replica), so another tenant's delivery is claimed with the first
// one. An attempt whose lease ran out no longer counts.
func TestWebhookClaimIsFairBetweenEndpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tenant := newStore(t, pgstore.StoreConfig{})
	other := newTenant(t, pool)
	w := st.Webhooks()
	busy, err := w.WebhookCreate(ctx, tenant, "https://busy.example.com/h", pgstore.WebhookEventTypes, "", []byte("k"), 5)
	if err != nil {
		t.Fatal(err)
	}
	quiet, err := w.WebhookCreate(ctx, other, "https://quiet.example.com/h", pgstore.WebhookEventTypes, "", []byte("k"), 5)
	if err != nil {
		t.Fatal(err)
	}
	queueDeliveries(t, pool, tenant, busy.ID, 20)
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_deliveries (id, endpoint_id, tenant_id, event_id, event_type, payload)
		VALUES (gen_random_uuid(), $1, $2, 'q', 'turn.completed', '{}')`, quiet.ID, other); err != nil { // the newest
		t.Fatal(err)
	}
	c, err := w.WebhookClaim(ctx, 5, time.Minute, 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := claimedEndpoints(c); len(c) != 2 || got[busy.ID] != 1 || got[quiet.ID] != 1 {
		t.Fatalf("claimed %v, want one of each endpoint", got)
	}
	// Both endpoints have an attempt in flight: nothing more, however many slots are free.
	if again, err := w.WebhookClaim(ctx, 5, time.Minute, 5, 1); err != nil || len(again) != 0 {
		t.Fatalf("claimed %d more with one in flight per endpoint (%v)", len(again), err)
	}
	// A bound of three: two more of the busy endpoint (three in flight).
	more, err := w.WebhookClaim(ctx, 5, 0, 5, 3)
	if err != nil || len(more) != 2 || claimedEndpoints(more)[busy.ID] != 2 {
		t.Fatalf("claimed %v (%v), want two more of the busy endpoint", claimedEndpoints(more), err)
	}
	// Those two were claimed with a zero lease (their replica died): they no longer count.
	if again, err := w.WebhookClaim(ctx, 5, time.Minute, 5, 3); err != nil || len(again) != 2 {
		t.Fatalf("claimed %d after two leases ran out (%v), want 2", len(again), err)
	}
	// The first attempt finishes: the next of the busy endpoint may go.
	var first pgstore.WebhookAttempt
	for _, a := range c {
		if a.EndpointID == busy.ID {
			first = a
		}
	}
	if ok, err := w.WebhookRecord(ctx, first, pgstore.WebhookOutcome{Status: 204, Delivered: true}); err != nil || !ok {
		t.Fatalf("record: %v %v", ok, err)
	}
	if again, err := w.WebhookClaim(ctx, 5, time.Minute, 5, 3); err != nil || len(again) != 1 || again[0].EndpointID != busy.ID {
		t.Fatalf("after a record: %v (%v), want one of the busy endpoint", claimedEndpoints(again), err)
	}
}

// TestWebhookConcurrentClaimsKeepTheEndpointBound: replicas claiming at once keep at most
// perEndpoint attempts in flight per endpoint.
func TestWebhookConcurrentClaimsKeepTheEndpointBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tenant := newStore(t, pgstore.StoreConfig{})
	w := st.Webhooks()
	var eps []uuid.UUID
	for i := range 3 {
		ep, err := w.WebhookCreate(ctx, tenant, "https://hooks.example.com/"+string(rune('a'+i)), pgstore.WebhookEventTypes, "", []byte("k"), 5)
		if err != nil {
			t.Fatal(err)
		}
		eps = append(eps, ep.ID)
		queueDeliveries(t, pool, tenant, ep.ID, 10)
	}
	var mu sync.Mutex
	got := map[uuid.UUID]int{}
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			c, err := w.WebhookClaim(ctx, 10, time.Minute, 5, 2)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for ep, n := range claimedEndpoints(c) {
				got[ep] += n
			}
		})
	}
	wg.Wait()
	for _, ep := range eps {
		if got[ep] < 1 || got[ep] > 2 {
			t.Fatalf("endpoint %s: %d in flight, want 1 or 2 (bound 2)", ep, got[ep])
		}
	}
}

// TestWebhookEndpointBackoff: a failure recorded with an endpoint backoff holds back every
// delivery of the endpoint (those waiting have their next attempt moved to its end, and one
// queued later is not claimed either) while other endpoints' are claimed; claims report the
// failures in a row; a success after the backoff clears both.
func TestWebhookEndpointBackoff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tenant := newStore(t, pgstore.StoreConfig{})
	w := st.Webhooks()
	down, err := w.WebhookCreate(ctx, tenant, "https://down.example.com/h", pgstore.WebhookEventTypes, "", []byte("k"), 5)
	if err != nil {
		t.Fatal(err)
	}
	up, err := w.WebhookCreate(ctx, tenant, "https://up.example.com/h", pgstore.WebhookEventTypes, "", []byte("k"), 5)
	if err != nil {
		t.Fatal(err)
	}
	queueDeliveries(t, pool, tenant, down.ID, 4)
	claimOne := func(ep uuid.UUID) pgstore.WebhookAttempt {
		t.Helper()
		c, err := w.WebhookClaim(ctx, 10, time.Minute, 10, 1)
		if err != nil || len(c) != 1 || c[0].EndpointID != ep {
			t.Fatalf("claim: %v (%v), want one of %s", claimedEndpoints(c), err, ep)
		}
		return c[0]
	}
	a := claimOne(down.ID)
	if a.EndpointFailures != 0 {
		t.Fatalf("failures %d before any", a.EndpointFailures)
	}
	if ok, err := w.WebhookRecord(ctx, a, pgstore.WebhookOutcome{Status: 500, Error: "e", RetryIn: 0}); err != nil || !ok {
		t.Fatalf("record: %v %v", ok, err)
	}
	a = claimOne(down.ID)
	if a.EndpointFailures != 1 {
		t.Fatalf("failures %d after one", a.EndpointFailures)
	}
	if ok, err := w.WebhookRecord(ctx, a, pgstore.WebhookOutcome{Status: 500, Error: "e", RetryIn: time.Second,
		EndpointBackoff: time.Hour}); err != nil || !ok {
		t.Fatalf("record: %v %v", ok, err)
	}
	for _, d := range deliveryLog(t, w, tenant, down.ID) {
		if d.Status != pgstore.DeliveryPending || time.Until(*d.NextAttemptAt) < 50*time.Minute {
			t.Fatalf("a delivery of the backed-off endpoint: %+v, want its next attempt in an hour", d)
		}
	}
	// Due or not, none of the endpoint's deliveries is claimed, a new one neither; another
	// endpoint's is.
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET next_attempt_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	queueDeliveries(t, pool, tenant, down.ID, 1)
	queueDeliveries(t, pool, tenant, up.ID, 1)
	claimOne(up.ID)
	// The hour passes: one attempt of the endpoint, which succeeds.
	if _, err := pool.Exec(ctx, `UPDATE webhook_endpoints SET backoff_until = now() - interval '1 second' WHERE id = $1`, down.ID); err != nil {
		t.Fatal(err)
	}
	a = claimOne(down.ID)
	if a.EndpointFailures != 2 {
		t.Fatalf("failures %d after two", a.EndpointFailures)
	}
	if ok, err := w.WebhookRecord(ctx, a, pgstore.WebhookOutcome{Status: 204, Delivered: true}); err != nil || !ok {
		t.Fatalf("record: %v %v", ok, err)
	}
	var failures int
	var until *time.Time
	if err := pool.QueryRow(ctx, `SELECT failures, backoff_until FROM webhook_endpoints WHERE id = $1`, down.ID).
		Scan(&failures, &until); err != nil || failures != 0 || until != nil {
		t.Fatalf("after a success: failures %d, backoff %v (%v)", failures, until, err)
	}
}

// TestWebhookFencingSurvivesRedelivery: an attempt that stalled past its lease cannot record over
// a later one, even after a redelivery started the attempts from 0 again (the later claim has
// the same attempt number, not the same token).
func TestWebhookFencingSurvivesRedelivery(t *testing.T) {
	t.Parallel()
	ctx, st, _, tenant, w, ep := newHookEndpoint(t)
	sess := newSession(t, st, tenant)
	endedTurn(t, st, tenant, sess.ID, 1)
	stalled, err := w.WebhookClaim(ctx, 10, 0, 5, 1) // its lease runs out at once
	if err != nil || len(stalled) != 1 || stalled[0].Attempt != 1 {
		t.Fatalf("claim: %+v %v", stalled, err)
	}
	second, err := w.WebhookClaim(ctx, 10, time.Minute, 5, 1)
	if err != nil || len(second) != 1 || second[0].Attempt != 2 {
		t.Fatalf("claim after the lease: %+v %v", second, err)
	}
	if ok, err := w.WebhookRecord(ctx, second[0], pgstore.WebhookOutcome{Status: 204, Delivered: true}); err != nil || !ok {
		t.Fatalf("record: %v %v", ok, err)
	}
	if _, err := w.WebhookRedeliver(ctx, tenant, ep.ID, second[0].ID); err != nil {
		t.Fatal(err)
	}
	third, err := w.WebhookClaim(ctx, 10, time.Minute, 5, 1)
	if err != nil || len(third) != 1 || third[0].Attempt != stalled[0].Attempt || third[0].Token == stalled[0].Token {
		t.Fatalf("claim after the redelivery: %+v %v", third, err)
	}
	if ok, err := w.WebhookRecord(ctx, stalled[0], pgstore.WebhookOutcome{Status: 500, Error: "late", GiveUp: true}); err != nil || ok {
		t.Fatalf("the stalled attempt recorded over the redelivery: %v %v", ok, err)
	}
	if ok, err := w.WebhookRecord(ctx, third[0], pgstore.WebhookOutcome{Status: 200, Delivered: true}); err != nil || !ok {
		t.Fatalf("record: %v %v", ok, err)
	}
	if d := deliveryLog(t, w, tenant, ep.ID)[0]; d.Status != pgstore.DeliveryDelivered || *d.LastStatus != 200 {
		t.Fatalf("log %+v", d)
	}
}

// TestWebhookRetentionKeepsUp: a retention pass deletes at most its limit of settled deliveries
// older than the retention, through the partial index on the settled time; pending deliveries
// older than the retention fail (and go at a later pass), newer ones stay.
func TestWebhookRetentionKeepsUp(t *testing.T) {
	t.Parallel()
	ctx, _, pool, tenant, w, ep := newHookEndpoint(t)
	ids := queueDeliveries(t, pool, tenant, ep.ID, 12)
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET created_at = now() - interval '3 hours'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET delivered_at = now() - interval '2 hours' WHERE id = ANY ($1)`, ids[:5]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET failed_at = now() - interval '2 hours' WHERE id = ANY ($1)`, ids[5:9]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET created_at = now() WHERE id = $1`, ids[11]); err != nil {
		t.Fatal(err)
	}
	// ids[9], ids[10]: pending for 3 hours; ids[11]: pending, new.
	for _, want := range []int64{4, 4, 1, 0} {
		if n, err := w.WebhookExpire(ctx, time.Hour, 4); err != nil || n != want {
			t.Fatalf("a pass expired %d (%v), want %d", n, err, want)
		}
	}
	if n, err := w.WebhookAbandon(ctx, time.Hour, 100); err != nil || n != 2 {
		t.Fatalf("abandoned %d (%v), want 2", n, err)
	}
	log := deliveryLog(t, w, tenant, ep.ID)
	if len(log) != 3 {
		t.Fatalf("left %d deliveries, want 3", len(log))
	}
	for _, d := range log {
		switch d.ID {
		case ids[11]:
			if d.Status != pgstore.DeliveryPending {
				t.Fatalf("a new pending delivery: %+v", d)
			}
		default:
			if d.Status != pgstore.DeliveryFailed || *d.LastError != "gave up: not delivered within the retention" {
				t.Fatalf("an old pending delivery: %+v", d)
			}
		}
	}

	// The pass's predicate is served by the partial index (were the planner to prefer it).
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(ctx, `RESET enable_seqscan`) }()
	rows, err := conn.Query(ctx, `EXPLAIN SELECT id FROM webhook_deliveries
		WHERE (delivered_at IS NOT NULL OR failed_at IS NOT NULL)
			AND coalesce(delivered_at, failed_at) < now() - 3600000 * interval '1 millisecond' LIMIT 4`)
	if err != nil {
		t.Fatal(err)
	}
	var plan strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if rows.Err() != nil || !strings.Contains(plan.String(), "webhook_deliveries_settled") {
		t.Fatalf("the retention pass does not use the settled index (%v):\n%s", rows.Err(), plan.String())
	}
}

// TestWebhookRewrapKeepsARotatedSecret: a secret rotated between the rewrap's read of the row and
// its update is not overwritten with the old one: the rewrap reads the row again and moves the
// new secret to the active key.
func TestWebhookRewrapKeepsARotatedSecret(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool, tenant := newStore(t, pgstore.StoreConfig{})
	oldKeys := pgstore.NewStore(pool, pgstore.StoreConfig{SecretKeys: testKeyring(t, "a")}).Webhooks()
	oldSecret, newSecret := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	ep, err := oldKeys.WebhookCreate(ctx, tenant, "https://example.com/a", pgstore.WebhookEventTypes, "", oldSecret, 10)
	if err != nil {
		t.Fatal(err)
	}
	rotated := false
	rewrapper := pgstore.NewStore(pool, pgstore.StoreConfig{SecretKeys: testKeyring(t, "b", "a")}).Webhooks().
		WithRewrapRead(func(id uuid.UUID) {
			if id == ep.ID && !rotated { // a replica with the old keyring rotates the secret now
				rotated = true
				if _, err := oldKeys.WebhookSetSecret(ctx, tenant, ep.ID, newSecret); err != nil {
					t.Error(err)
				}
			}
		})
	res, err := rewrapper.WebhookRewrap(ctx)
	if err != nil || !rotated || res.Rewrapped != 1 {
		t.Fatalf("rewrap: %+v %v (rotated %v)", res, err, rotated)
	}
	var kek string
	if err := pool.QueryRow(ctx, `SELECT kek_id FROM webhook_endpoints WHERE id = $1`, ep.ID).Scan(&kek); err != nil || kek != "b" {
		t.Fatalf("kek %q (%v), want b", kek, err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_deliveries (id, endpoint_id, tenant_id, event_id, event_type, payload)
		VALUES (gen_random_uuid(), $1, $2, 'e', 'turn.completed', '{}')`, ep.ID, tenant); err != nil {
		t.Fatal(err)
	}
	c, err := pgstore.NewStore(pool, pgstore.StoreConfig{SecretKeys: testKeyring(t, "b")}).Webhooks().WebhookClaim(ctx, 10, time.Minute, 5, 1)
	if err != nil || len(c) != 1 || c[0].SecretErr != nil {
		t.Fatalf("claim: %+v %v", c, err)
	}
	if !bytes.Equal(c[0].Secret, newSecret) {
		t.Fatalf("the rewrap overwrote the rotated secret (old one back: %v)", bytes.Equal(c[0].Secret, oldSecret))
	}
}

// goTime is the form Go gives a webhook event's createdAt: RFC 3339 in UTC ("Z"), with up to
// three fraction digits, trailing zeros dropped.
var goTime = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,3})?Z$`)

// TestWebhookSessionIdleTimeIsTheSameOnBothPaths: session.idle written by an append that releases
// the lease and by LeaseRelease have createdAt in the same form: it parses into
// pgstore.WebhookEvent and marshals back to the very same string.
func TestWebhookSessionIdleTimeIsTheSameOnBothPaths(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tenant := newStore(t, pgstore.StoreConfig{})
	w := st.Webhooks()
	if _, err := w.WebhookCreate(ctx, tenant, "https://hooks.example.com/a", []string{pgstore.WebhookSessionIdle}, "", []byte("k"), 5); err != nil {
		t.Fatal(err)
	}
	// The append path: a turn's last append releases the lease.
	sess := newSession(t, st, tenant)
	owner := uuid.New()
	if ok, _, err := st.LeaseAcquire(ctx, tenant, sess.ID, owner, time.Minute); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	j := st.Journal(nil, tenant, sess.ID, owner)
	j.ReleaseAtTurnEnd(true)
	if _, err := j.Append(ctx, eventlog.Batch(turnStartEv(1),
		eventlog.NewEvent{Type: "turn/end", Data: map[string]any{"turn": 1, "reason": map[string]string{"kind": "completed"}}})); err != nil {
		t.Fatal(err)
	}
	if !j.Released() {
		t.Fatal("the turn's last append did not release the lease")
	}
	// The release path, several times (a time of whole seconds or tens of milliseconds, too).
	for range 5 {
		s := newSession(t, st, tenant)
		if ok, _, err := st.LeaseAcquire(ctx, tenant, s.ID, owner, time.Minute); err != nil || !ok {
			t.Fatalf("acquire: %v %v", ok, err)
		}
		if released, err := st.LeaseRelease(ctx, tenant, s.ID, owner); err != nil || !released {
			t.Fatalf("release: %v %v", released, err)
		}
	}
	rows, err := pool.Query(ctx, `SELECT payload::text, event_id FROM webhook_deliveries WHERE event_type = 'session.idle'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	paths := map[bool]int{} // append path: true
	for rows.Next() {
		var body, id string
		if err := rows.Scan(&body, &id); err != nil {
			t.Fatal(err)
		}
		var raw struct {
			CreatedAt string `json:"createdAt"`
		}
		var ev pgstore.WebhookEvent
		if err := json.Unmarshal([]byte(body), &raw); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(body), &ev); err != nil || ev.ID != id || ev.Type != pgstore.WebhookSessionIdle {
			t.Fatalf("payload %s: %v", body, err)
		}
		back, _ := json.Marshal(ev.CreatedAt)
		if !goTime.MatchString(raw.CreatedAt) || string(back) != `"`+raw.CreatedAt+`"` || ev.CreatedAt.Location() != time.UTC {
			t.Fatalf("createdAt %q (%s) is not Go's UTC form %s", raw.CreatedAt, id, back)
		}
		if d := time.Since(ev.CreatedAt); d < 0 || d > time.Minute {
			t.Fatalf("createdAt %s is %v from now", raw.CreatedAt, d)
		}
		paths[strings.HasPrefix(id, sess.ID.String())]++
	}
	if rows.Err() != nil || paths[true] != 1 || paths[false] != 5 {
		t.Fatalf("session.idle deliveries by path %v (%v), want 1 append and 5 releases", paths, rows.Err())
	}
}
