package pgstore_test

import (
	"context"
	"testing"
	"time"

	et "github.com/dshd/dshd/pkg/eventlog/eventlogtest"

	"github.com/dshd/dshd/pkg/pgstore"
)

// await fails the test unless c delivers within a generous bound (a guard against hangs, not a
// timing assertion).
func await(t testing.TB, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(20 * time.Second):
		t.Fatalf("no wake: %s", what)
	}
}

func pending(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestHubWakesCoalescesAndReconnects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tenant := newStore(t, pgstore.StoreConfig{})
	a, b := newSession(t, st, tenant), newSession(t, st, tenant)
	hub := pgstore.NewHub(pool, pgstore.HubConfig{ReconnectDelay: 20 * time.Millisecond})
	if err := hub.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := hub.Start(ctx); err != nil { // idempotent
		t.Fatal(err)
	}
	t.Cleanup(hub.Stop)
	wakeA, cancelA := hub.Subscribe(a.ID)
	defer cancelA()
	wakeB, cancelB := hub.Subscribe(b.ID)
	defer cancelB()

	// A commit on another connection wakes the session's subscriber, and only it.
	if _, err := appendEvents(st, ctx, tenant, a.ID, et.TurnStart(1)); err != nil {
		t.Fatal(err)
	}
	await(t, wakeA, "after a commit")
	if _, err := appendEvents(st, ctx, tenant, b.ID, et.TurnStart(1)); err != nil {
		t.Fatal(err)
	}
	await(t, wakeB, "after a commit to b")
	if pending(wakeA) {
		t.Fatal("a commit to b woke a's subscriber")
	}

	// Five commits while the subscriber is not reading coalesce into one pending wake. The wake of
	// b, sent after them, proves the hub has processed all five.
	for i := range 5 {
		if _, err := appendEvents(st, ctx, tenant, a.ID, et.StepStart(1, i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := appendEvents(st, ctx, tenant, b.ID, et.StepStart(1, 1)); err != nil {
		t.Fatal(err)
	}
	await(t, wakeB, "sentinel")
	if !pending(wakeA) || pending(wakeA) {
		t.Fatal("five commits did not leave exactly one pending wake")
	}

	// Killing the listener's backend: after the reconnect every subscriber is woken, with no
	// commit, so it re-reads what it may have missed; then notifications flow again.
	var killed int
	err := pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND datname = current_database()`, pgstore.HubApplicationName).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminated %d listener backends: %v", killed, err)
	}
	await(t, wakeA, "after the listener reconnected")
	await(t, wakeB, "after the listener reconnected (b)")
	if _, err := appendEvents(st, ctx, tenant, a.ID, et.TurnEnd(1)); err != nil {
		t.Fatal(err)
	}
	await(t, wakeA, "after a commit on the new listener connection")

	// A cancelled subscription is not woken; Stop is idempotent.
	cancelB()
	if _, err := appendEvents(st, ctx, tenant, b.ID, et.StepEnd(1, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := appendEvents(st, ctx, tenant, a.ID, et.TurnStart(2)); err != nil {
		t.Fatal(err)
	}
	await(t, wakeA, "sentinel after cancel")
	if pending(wakeB) {
		t.Fatal("a cancelled subscription was woken")
	}
	hub.Stop()
	hub.Stop()
}

func TestHubHeartbeatWakesEveryone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tenant := newStore(t, pgstore.StoreConfig{})
	sess := newSession(t, st, tenant)
	hub := pgstore.NewHub(pool, pgstore.HubConfig{Heartbeat: 10 * time.Millisecond})
	if err := hub.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer hub.Stop()
	wake, cancel := hub.Subscribe(sess.ID)
	defer cancel()
	await(t, wake, "heartbeat")
	await(t, wake, "second heartbeat")
}

func TestHubFromURLFailsCleanly(t *testing.T) {
	t.Parallel()
	if _, err := pgstore.NewHubFromURL("postgres://%zz", pgstore.HubConfig{}); err == nil {
		t.Fatal("a malformed URL was accepted")
	}
	hub, err := pgstore.NewHubFromURL("postgres://nobody@127.0.0.1:1/x?connect_timeout=2", pgstore.HubConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := hub.Start(context.Background()); err == nil {
		hub.Stop()
		t.Fatal("Start succeeded without a database")
	}
	hub.Stop() // no-op on a hub that never started
}
