package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/worker"
	"github.com/google/uuid"
)

// TestHoldKeepsTurnsOutAndServesWhatWaited (issue 17, finding 1): a fork copied the source's
// workspace while a turn of the source could run. Hold is the fork's run lease: while it is held
// a second holder is refused (ErrSessionBusy) and a message posted meanwhile starts no turn (the
// lease is the holder's, not a runner's); its release hands the message to a runner, which
// serves it.
func TestHoldKeepsTurnsOutAndServesWhatWaited(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.replica(2 * time.Second)
	sid := e.session()
	ctx := context.Background()
	held, err := r.svc.Hold(ctx, e.tenant, sid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.svc.Hold(ctx, e.tenant, sid); !errors.Is(err, worker.ErrSessionBusy) {
		t.Fatalf("a second hold: %v, want ErrSessionBusy", err)
	}
	post(t, r, e.tenant, sid, "text", worker.ModeFollowup)
	h, err := e.store.SessionHead(ctx, e.tenant, sid)
	if err != nil {
		t.Fatal(err)
	}
	if h.Lease.Owner == "" || h.Lease.Owner == r.svc.Owner().String() || count(e.events(sid), eventlog.TypeTurnStart) != 0 {
		t.Fatalf("a turn took the held lease: owner %q, events %d", h.Lease.Owner, len(e.events(sid)))
	}
	held.Release()
	held.Release() // once
	e.waitTurnEnds(r.hub, sid, 1, 30*time.Second)
	e.waitReleased(sid)
	if _, err := r.svc.Hold(ctx, e.tenant, uuid.New()); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("hold of an unknown session: %v", err)
	}
}

// TestHoldRefusesAnExpiredLeaseOfAnotherOwner (review of issue 17, finding 7b): Hold took over
// the expired lease of a crashed worker and its release then cleared the owner, so the sweeper
// (LeasesExpired) never found the stalled open turn again. Now Hold refuses it (ErrSessionBusy)
// and the dead owner stays recorded for the sweeper.
func TestHoldRefusesAnExpiredLeaseOfAnotherOwner(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.replica(2 * time.Second)
	sid := e.session()
	ctx := context.Background()
	dead := uuid.New()
	// A lease that expired a second ago (the database's clock): its holder crashed.
	if ok, _, err := e.store.LeaseAcquire(ctx, e.tenant, sid, dead, -time.Second); err != nil || !ok {
		t.Fatalf("acquire: %v, %v", ok, err)
	}
	if h, err := r.svc.Hold(ctx, e.tenant, sid); !errors.Is(err, worker.ErrSessionBusy) {
		if h != nil {
			h.Release()
		}
		t.Fatalf("hold of an expired lease of a crashed owner: %v, want ErrSessionBusy", err)
	}
	expired, err := e.store.LeasesExpired(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ref := range expired {
		found = found || ref.SessionID == sid
	}
	if !found {
		t.Fatal("the crashed owner's lease is no longer found by the sweeper")
	}
}

// TestHoldConfirmReportsALostLease (review of issue 17, finding 7a): Hold ignored its renewals'
// errors, so a fork whose lease was lost (expired and taken by a turn) went on copying as if it
// held it. Confirm now reports the loss (eventlog.ErrLeaseLost), and nil while the lease is held.
func TestHoldConfirmReportsALostLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.replica(2 * time.Second)
	sid := e.session()
	ctx := context.Background()
	held, err := r.svc.Hold(ctx, e.tenant, sid)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	if err := held.Confirm(ctx); err != nil {
		t.Fatalf("confirm of a held lease: %v", err)
	}
	// Another owner takes the lease (as a turn does once a hold's lease expired).
	if _, err := e.pool.Exec(ctx, `UPDATE session_counters SET run_owner = $2 WHERE session_id = $1`, sid, uuid.New()); err != nil {
		t.Fatal(err)
	}
	if err := held.Confirm(ctx); !errors.Is(err, eventlog.ErrLeaseLost) {
		t.Fatalf("confirm of a lost lease: %v, want ErrLeaseLost", err)
	}
	if err := held.Confirm(ctx); !errors.Is(err, eventlog.ErrLeaseLost) {
		t.Fatalf("a second confirm of a lost lease: %v, want ErrLeaseLost", err)
	}
}
