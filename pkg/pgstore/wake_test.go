package pgstore_test

import (
	"context"
	"testing"
	"time"

	et "github.com/dshd/dshd/pkg/eventlog/eventlogtest"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/pgstore"
)

func postSteer(t *testing.T, st *pgstore.Store, q *pgstore.Queue, tenant, session uuid.UUID) {
	t.Helper()
	msg := llm.NewUserMessage(uuid.NewString(), "hi")
	_, err := st.Post(context.Background(), pgstore.PostParams{Tenant: tenant, Session: session, Queue: q, Message: msg.ID,
		Build: func(h eventlog.Head) ([]eventlog.NewEvent, error) {
			return []eventlog.NewEvent{eventlog.Of(eventlog.Insertion(eventlog.InboxNextStep, h.Inbox.NextStep, msg))}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
}

func wakeJobs(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE kind = 'dshd_turn'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOneWakeJobPerSession (issue 9, finding 7): posts to an idle session that no poster
// serves enqueue one wake job, not one each; posts to a session whose lease is live enqueue none
// and keep the holder from releasing (run_wake) until it has served again, also at a turn's
// last append; a job that ran (lease taken or busy) lets the next post enqueue again.
func TestOneWakeJobPerSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tenant := newStore(t, pgstore.StoreConfig{})
	q, err := pgstore.NewQueue(st, pgstore.QueueConfig{InsertOnly: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sid := newSession(t, st, tenant).ID
	for range 20 {
		postSteer(t, st, q, tenant, sid)
	}
	if n := wakeJobs(t, pool); n != 1 {
		t.Fatalf("20 posts to an idle session enqueued %d wake jobs, want 1", n)
	}
	owner := uuid.New()
	if o, _, err := st.LeaseTake(ctx, tenant, sid, owner, time.Minute, 0); err != nil || o != pgstore.LeaseTaken {
		t.Fatalf("take: %v %v", o, err)
	}
	j := st.Journal(nil, tenant, sid, owner)
	j.ReleaseAtTurnEnd(true)
	start, err := j.Append(ctx, eventlog.Batch(et.TurnStart(1)))
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		postSteer(t, st, q, tenant, sid) // the holder serves them
	}
	if n := wakeJobs(t, pool); n != 1 {
		t.Fatalf("posts to a busy session enqueued %d more jobs", n-1)
	}
	if _, err := j.Since(ctx, start[0].Seq); err != nil { // the runner folds the posts
		t.Fatal(err)
	}
	if _, err := j.Append(ctx, eventlog.Batch(et.TurnEnd(1))); err != nil || j.Released() {
		t.Fatalf("turn end with a waking post since the take: released %v, %v; want the lease kept", j.Released(), err)
	}
	if released, err := st.LeaseRelease(ctx, tenant, sid, owner); err != nil || released {
		t.Fatalf("first release: %v %v; want kept, to serve again", released, err)
	}
	if released, err := st.LeaseRelease(ctx, tenant, sid, owner); err != nil || !released {
		t.Fatalf("release after serving again: %v %v", released, err)
	}
	postSteer(t, st, q, tenant, sid)
	if n := wakeJobs(t, pool); n != 2 {
		t.Fatalf("a post after the job ran: %d jobs, want 2", n)
	}
	other := uuid.New()
	if o, _, err := st.LeaseTake(ctx, tenant, sid, other, time.Minute, 0); err != nil || o != pgstore.LeaseTaken {
		t.Fatalf("take: %v %v", o, err)
	}
	// A duplicate job (as after a stale queued mark) finds the lease busy: it is done, and the
	// session has no queued job any more.
	if o, _, err := st.LeaseTake(ctx, tenant, sid, uuid.New(), time.Minute, 0); err != nil || o != pgstore.LeaseBusy {
		t.Fatalf("take of a busy lease: %v %v", o, err)
	}
	if err := q.LeaseDrop(ctx, st, tenant, sid, other); err != nil {
		t.Fatal(err)
	}
	if n := wakeJobs(t, pool); n != 3 {
		t.Fatalf("a drop with messages waiting: %d jobs, want a handoff (3)", n)
	}
}
