package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
)

// TestPostToAnIdleSessionIsExactWhateverTheStoreExpects (issue 20): a post to an idle session is
// one statement (dshd_post_idle) that gives the splice the seq after the log's end, whoever wrote
// the log; when the session is not idle (another replica's post holds its lease) or the tenant
// has no free turn slot, the post goes the general way: exactly one splice, at the log's end,
// and the lease or a wake job as before.
func TestPostToAnIdleSessionIsExactWhateverTheStoreExpects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tenant := newStore(t, pgstore.StoreConfig{})
	other := pgstore.NewStore(pool, pgstore.StoreConfig{}) // another replica's store
	q, err := pgstore.NewQueue(st, pgstore.QueueConfig{InsertOnly: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	offer := func(max int) *pgstore.LeaseOffer {
		return &pgstore.LeaseOffer{Owner: uuid.New(), TTL: time.Minute, MaxTenant: max}
	}
	splices := func(id uuid.UUID) []int64 {
		evs, err := st.EventList(ctx, tenant, id, pgstore.ListQuery{After: -1, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		for _, ev := range evs {
			if ev.Type == eventlog.TypeInboxSpliced {
				seqs = append(seqs, ev.Seq)
			}
		}
		return seqs
	}

	// A new session: the first post takes the lease.
	a := newSession(t, st, tenant).ID
	out, err := postFollowup(st, q, tenant, a, offer(2))
	if err != nil || !out.Leased || out.Seq != 0 || out.Head.Next != 1 || out.Head.Inbox.NextTurn != 1 {
		t.Fatalf("post to a new session: %+v, %v", out, err)
	}

	// Another store appended after this one created the session.
	b := newSession(t, st, tenant).ID
	if _, err := appendEvents(other, ctx, tenant, b, eventlog.Of(eventlog.TurnStart{Turn: 1}), eventlog.Of(eventlog.TurnEnd{Turn: 1, Reason: eventlog.TurnReason{Kind: eventlog.EndCompleted}})); err != nil {
		t.Fatal(err)
	}
	out, err = postFollowup(st, q, tenant, b, offer(2))
	if err != nil || !out.Leased || out.Seq != 2 || out.Head.Next != 3 {
		t.Fatalf("post after another store's append: %+v, %v", out, err)
	}
	if got := splices(b); len(got) != 1 || got[0] != 2 {
		t.Fatalf("splices %v, want one at seq 2", got)
	}

	// The tenant's two slots are live (a and b): the post enqueues a wake job instead.
	c := newSession(t, st, tenant).ID
	out, err = postFollowup(st, q, tenant, c, offer(2))
	if err != nil || out.Leased {
		t.Fatalf("post with no free turn slot: leased %v, %v; want a wake job", out.Leased, err)
	}
	var queued bool
	if err := pool.QueryRow(ctx, `SELECT wake_queued_at IS NOT NULL FROM session_counters WHERE session_id = $1`, c).Scan(&queued); err != nil || !queued {
		t.Fatalf("wake queued %v, %v", queued, err)
	}
	if got := splices(c); len(got) != 1 || got[0] != 0 {
		t.Fatalf("splices %v, want one at seq 0", got)
	}
	// Busy: another replica's post took the session's lease: the post leaves the message to the
	// holder.
	d := newSession(t, st, tenant).ID
	if _, err := postFollowup(other, q, tenant, d, offer(0)); err != nil {
		t.Fatal(err)
	}
	out, err = postFollowup(st, q, tenant, d, offer(0))
	if err != nil || out.Leased || out.Seq != 1 {
		t.Fatalf("post to a session another store serves: %+v, %v", out, err)
	}
	if got := splices(d); len(got) != 2 {
		t.Fatalf("splices %v, want two", got)
	}
	// A deleted session answers as before.
	e := newSession(t, st, tenant).ID
	if err := st.SessionDelete(ctx, tenant, e); err != nil {
		t.Fatal(err)
	}
	if _, err := postFollowup(st, q, tenant, e, offer(0)); err == nil {
		t.Fatal("post to a deleted session succeeded")
	}
}
