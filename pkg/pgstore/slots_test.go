package pgstore_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/pgstore"
)

func postFollowup(st *pgstore.Store, q *pgstore.Queue, tenant, session uuid.UUID, lease *pgstore.LeaseOffer) (pgstore.Posted, error) {
	msg := llm.NewUserMessage(uuid.NewString(), "hi")
	return st.Post(context.Background(), pgstore.PostParams{Tenant: tenant, Session: session, Queue: q, Lease: lease, Message: msg.ID,
		Build: func(h eventlog.Head) ([]eventlog.NewEvent, error) {
			return []eventlog.NewEvent{eventlog.Of(eventlog.Insertion(eventlog.InboxNextTurn, h.Inbox.NextTurn, msg))}, nil
		}})
}

// TestTurnSlotsNeverWaitForAnotherTakersCommit (issue 9, finding 6): the tenant check and
// the lease take are atomic, and a taker never waits for another taker's commit: with a slot
// locked by a transaction that has not committed, a post takes another slot at once; with every
// slot locked or live, it falls back to a wake job at once; LeaseTake answers LeaseTenantFull.
func TestTurnSlotsNeverWaitForAnotherTakersCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tenant := newStore(t, pgstore.StoreConfig{})
	q, err := pgstore.NewQueue(st, pgstore.QueueConfig{InsertOnly: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := newSession(t, st, tenant).ID, newSession(t, st, tenant).ID, newSession(t, st, tenant).ID
	offer := func() *pgstore.LeaseOffer {
		return &pgstore.LeaseOffer{Owner: uuid.New(), TTL: time.Minute, MaxTenant: 2}
	}
	if out, err := postFollowup(st, q, tenant, a, offer()); err != nil || !out.Leased {
		t.Fatalf("first post: leased %v, %v", out.Leased, err)
	}
	// A taker in flight: the other slot locked by a transaction that stays open.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM tenant_turn_slots WHERE tenant_id = $1
		AND session_id IS DISTINCT FROM $2 FOR UPDATE`, tenant, a); err != nil {
		t.Fatal(err)
	}
	quick, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg := llm.NewUserMessage(uuid.NewString(), "hi")
	out, err := st.Post(quick, pgstore.PostParams{Tenant: tenant, Session: b, Queue: q, Lease: offer(), Message: msg.ID,
		Build: func(h eventlog.Head) ([]eventlog.NewEvent, error) {
			return []eventlog.NewEvent{eventlog.Of(eventlog.Insertion(eventlog.InboxNextTurn, h.Inbox.NextTurn, msg))}, nil
		}})
	if err != nil || out.Leased {
		t.Fatalf("post with one slot live and the other locked: leased %v, %v; want a wake job, without waiting", out.Leased, err)
	}
	if o, _, err := st.LeaseTake(quick, tenant, c, uuid.New(), time.Minute, 2); err != nil || o != pgstore.LeaseTenantFull {
		t.Fatalf("LeaseTake: %v, %v; want LeaseTenantFull at once", o, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if o, _, err := st.LeaseTake(ctx, tenant, c, uuid.New(), time.Minute, 2); err != nil || o != pgstore.LeaseTaken {
		t.Fatalf("LeaseTake with the other slot free: %v, %v", o, err)
	}
	if o, _, err := st.LeaseTake(ctx, tenant, b, uuid.New(), time.Minute, 2); err != nil || o != pgstore.LeaseTenantFull {
		t.Fatalf("LeaseTake with both slots live: %v, %v", o, err)
	}
	if o, _, err := st.LeaseTake(ctx, tenant, a, uuid.New(), time.Minute, 2); err != nil || o != pgstore.LeaseBusy {
		t.Fatalf("LeaseTake of a held lease: %v, %v", o, err)
	}
}

// BenchmarkPostTakesLease measures posts that take an idle session's lease, 8 at a time, for
// one tenant, each lease dropped right after (a turn that ends at once): without a tenant bound,
// and with the default bound of 20 (turn slots). A bound that serialized the tenant's posts
// through a commit would divide posts/s by the parallelism.
func BenchmarkPostTakesLease(b *testing.B) {
	for _, bound := range []int{0, 20} {
		name := "unbounded"
		if bound > 0 {
			name = "slots"
		}
		b.Run(name, func(b *testing.B) {
			st, _, tenant := newStore(b, pgstore.StoreConfig{})
			q, err := pgstore.NewQueue(st, pgstore.QueueConfig{InsertOnly: true}, nil)
			if err != nil {
				b.Fatal(err)
			}
			sessions := make([]uuid.UUID, 64)
			for i := range sessions {
				sessions[i] = newSession(b, st, tenant).ID
			}
			var wg sync.WaitGroup
			var leased atomic.Int64
			work := make(chan int)
			b.ResetTimer()
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range work {
						id := sessions[w+8*rand.IntN(8)] // sessions of one worker: no lock waits
						owner := uuid.New()
						out, err := postFollowup(st, q, tenant, id, &pgstore.LeaseOffer{Owner: owner, TTL: time.Minute, MaxTenant: bound})
						if err != nil {
							b.Error(err)
							return
						}
						if out.Leased {
							leased.Add(1)
							if err := st.LeaseDrop(context.Background(), tenant, id, owner); err != nil {
								b.Error(err)
								return
							}
						}
					}
				}()
			}
			for i := range b.N {
				work <- i
			}
			close(work)
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "posts/s")
			b.ReportMetric(float64(leased.Load())/float64(b.N), "leased/op")
		})
	}
}
