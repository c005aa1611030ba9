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
	release, err := r.svc.Hold(ctx, e.tenant, sid)
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
	release()
	release() // once
	e.waitTurnEnds(r.hub, sid, 1, 30*time.Second)
	e.waitReleased(sid)
	if _, err := r.svc.Hold(ctx, e.tenant, uuid.New()); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("hold of an unknown session: %v", err)
	}
}
