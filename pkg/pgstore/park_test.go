package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dshd/dshd/pkg/eventlog"
	et "github.com/dshd/dshd/pkg/eventlog/eventlogtest"
	"github.com/dshd/dshd/pkg/pgstore"
)

// deadlineJobs counts the scheduled deadline jobs of parked turns.
func deadlineJobs(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
		WHERE kind = 'dshd_park_deadline' AND state = 'scheduled'`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestE6_LeaseParkReleasesWhateverWaits: a parked turn's holder gives up the lease and the
// tenant's turn slot even while a followup waits (LeaseRelease would keep the lease), so another
// session of the tenant takes the only slot, and the park schedules its deadline jobs; a second
// park reports the lease lost.
func TestE6_LeaseParkReleasesWhateverWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tenant := newStore(t, pgstore.StoreConfig{})
	q, err := pgstore.NewQueue(st, pgstore.QueueConfig{InsertOnly: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	parked, other := newSession(t, st, tenant), newSession(t, st, tenant)
	owner := uuid.New()
	if o, _, err := st.LeaseTake(ctx, tenant, parked.ID, owner, time.Minute, 1); err != nil || o != pgstore.LeaseTaken {
		t.Fatalf("take: %v %v", o, err)
	}
	followup := et.NE("agent/inbox/spliced", map[string]any{"target": "next-turn", "start": 0, "inserted": []any{et.UserMsg("m1", "hi")}})
	if _, err := appendEvents(st, ctx, tenant, parked.ID, followup); err != nil {
		t.Fatal(err)
	}
	if o, _, err := st.LeaseTake(ctx, tenant, other.ID, uuid.New(), time.Minute, 1); err != nil || o != pgstore.LeaseTenantFull {
		t.Fatalf("take of the other session while the slot is held: %v %v; want tenant full", o, err)
	}
	deadline := pgstore.ParkDeadline{TenantID: tenant, SessionID: parked.ID, Wait: eventlog.ParkWait{Kind: eventlog.ParkApproval,
		CallID: "c1", ToolName: "write", ApprovalID: "a1", DeadlineMs: time.Now().Add(time.Hour).UnixMilli()}}
	if ok, err := q.LeasePark(ctx, st, tenant, parked.ID, owner, []pgstore.ParkDeadline{deadline}); err != nil || !ok {
		t.Fatalf("park: %v %v; want parked", ok, err)
	}
	if h, err := st.SessionHead(ctx, tenant, parked.ID); err != nil || h.Lease.Owner != "" || h.Inbox.NextTurn != 1 {
		t.Fatalf("head after the park: %+v, %v; want no lease and the followup still waiting", h, err)
	}
	if n, err := st.LeasesHeld(ctx, tenant); err != nil || n != 0 {
		t.Fatalf("leases held after the park: %d, %v", n, err)
	}
	if n := deadlineJobs(t, pool); n != 1 {
		t.Fatalf("%d deadline jobs scheduled, want 1", n)
	}
	if o, _, err := st.LeaseTake(ctx, tenant, other.ID, uuid.New(), time.Minute, 1); err != nil || o != pgstore.LeaseTaken {
		t.Fatalf("take of the other session after the park: %v %v; want taken", o, err)
	}
	if _, err := q.LeasePark(ctx, st, tenant, parked.ID, owner, nil); err != eventlog.ErrLeaseLost {
		t.Fatalf("second park: %v; want ErrLeaseLost", err)
	}
	// The same turn parked again (another holder, the same wait) schedules no second job.
	again := uuid.New()
	if ok, _, err := st.LeaseAcquire(ctx, tenant, parked.ID, again, time.Minute); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	if ok, err := q.LeasePark(ctx, st, tenant, parked.ID, again, []pgstore.ParkDeadline{deadline}); err != nil || !ok {
		t.Fatalf("park again: %v %v", ok, err)
	}
	if n := deadlineJobs(t, pool); n != 1 {
		t.Fatalf("%d deadline jobs after the second park, want 1", n)
	}
}

// TestE6_LeaseParkKeepsTheLeaseForAnAnswer: an answer posted while the holder still held the lease
// set run_wake and enqueued no job; the park then keeps the lease (the holder serves again and
// reads the answer), clears run_wake and schedules nothing, and the next park gives it up.
func TestE6_LeaseParkKeepsTheLeaseForAnAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tenant := newStore(t, pgstore.StoreConfig{})
	q, err := pgstore.NewQueue(st, pgstore.QueueConfig{InsertOnly: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sid := newSession(t, st, tenant).ID
	owner := uuid.New()
	if o, _, err := st.LeaseTake(ctx, tenant, sid, owner, time.Minute, 0); err != nil || o != pgstore.LeaseTaken {
		t.Fatalf("take: %v %v", o, err)
	}
	_, err = st.Post(ctx, pgstore.PostParams{Tenant: tenant, Session: sid, Queue: q,
		Build: func(eventlog.Head) ([]eventlog.NewEvent, error) {
			return []eventlog.NewEvent{eventlog.Of(eventlog.ClientResult{CallID: "c1"})}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if n := wakeJobs(t, pool); n != 0 {
		t.Fatalf("an answer to a held session enqueued %d wake jobs, want 0", n)
	}
	deadline := pgstore.ParkDeadline{TenantID: tenant, SessionID: sid, Wait: eventlog.ParkWait{Kind: eventlog.ParkClient,
		CallID: "c2", ToolName: "pick", DeadlineMs: time.Now().Add(time.Hour).UnixMilli()}}
	if ok, err := q.LeasePark(ctx, st, tenant, sid, owner, []pgstore.ParkDeadline{deadline}); err != nil || ok {
		t.Fatalf("park with an answer waiting: %v %v; want the lease kept", ok, err)
	}
	if h, err := st.SessionHead(ctx, tenant, sid); err != nil || h.Lease.Owner != owner.String() || deadlineJobs(t, pool) != 0 {
		t.Fatalf("after the refused park: head %+v, %v, %d deadline jobs; want the lease kept and no job", h, err, deadlineJobs(t, pool))
	}
	if ok, err := q.LeasePark(ctx, st, tenant, sid, owner, []pgstore.ParkDeadline{deadline}); err != nil || !ok {
		t.Fatalf("second park: %v %v; want parked (run_wake was cleared)", ok, err)
	}
	if n, err := st.LeasesHeld(ctx, tenant); err != nil || n != 0 || deadlineJobs(t, pool) != 1 {
		t.Fatalf("after the park: %d leases held (%v), %d deadline jobs; want 0 and 1", n, err, deadlineJobs(t, pool))
	}
}
