package pgstore_test

import (
	"context"
	"testing"
	"time"

	et "github.com/dshd/dshd/pkg/eventlog/eventlogtest"

	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/google/uuid"
)

// TestLeaseReleaseKeptWhileFollowupsWait: the release keeps the lease while a followup waits in
// the next-turn list, so the runner serves it; next-step messages (contexts parked by a cancel,
// injects) do not keep it: they wait for the next wake (LOOP-1, LOOP-7).
func TestLeaseReleaseKeptWhileFollowupsWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, target := range []string{"next-turn", "next-step"} {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			st, _, tenant := newStore(t, pgstore.StoreConfig{})
			sess := newSession(t, st, tenant)
			owner := uuid.New()
			if ok, _, err := st.LeaseAcquire(ctx, tenant, sess.ID, owner, time.Minute); err != nil || !ok {
				t.Fatalf("acquire: %v %v", ok, err)
			}
			insertion := et.NE("agent/inbox/spliced", map[string]any{"target": target, "start": 0, "inserted": []any{et.UserMsg("m1", "hi")}})
			if _, err := appendEvents(st, ctx, tenant, sess.ID, insertion); err != nil {
				t.Fatal(err)
			}
			released, err := st.LeaseRelease(ctx, tenant, sess.ID, owner)
			if target == "next-step" {
				if err != nil || !released {
					t.Fatalf("release with a next-step message waiting: released %v, %v; want released", released, err)
				}
				return
			}
			if err != nil || released {
				t.Fatalf("release with a %s message waiting: released %v, %v", target, released, err)
			}
			if h, err := st.SessionHead(ctx, tenant, sess.ID); err != nil || h.Lease.Owner != owner.String() {
				t.Fatalf("head after a refused release: %+v, %v", h, err)
			}
			removal := et.NE("agent/inbox/spliced", map[string]any{"target": target, "start": 0, "removedCount": 1, "inserted": []any{}})
			if _, err := appendEvents(st, ctx, tenant, sess.ID, removal); err != nil {
				t.Fatal(err)
			}
			if released, err := st.LeaseRelease(ctx, tenant, sess.ID, owner); err != nil || !released {
				t.Fatalf("release with an empty inbox: released %v, %v", released, err)
			}
		})
	}
}

// TestSES15_ForkStartsWithAnEmptyInbox: the parent's waiting messages are not the child's
// (LOOP-1 rebuilds the inbox from the splices after the seed), so no job-less message is left
// queued in the fork.
func TestSES15_ForkStartsWithAnEmptyInbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, tenant := newStore(t, pgstore.StoreConfig{})
	sess := newSession(t, st, tenant)
	ins := et.NE("agent/inbox/spliced", map[string]any{"target": "next-turn", "start": 0, "inserted": []any{et.UserMsg("m1", "hi")}})
	if _, err := appendEvents(st, ctx, tenant, sess.ID, et.TurnStart(1), et.TurnEnd(1), ins); err != nil {
		t.Fatal(err)
	}
	child, err := st.Fork(ctx, tenant, sess.ID, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := st.SessionHead(ctx, tenant, child.ID)
	if err != nil || h.Inbox.NextTurn != 0 || h.Inbox.NextStep != 0 {
		t.Fatalf("child head %+v, %v; want an empty inbox", h, err)
	}
}
