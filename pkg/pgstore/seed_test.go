package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/pgstore"
)

// TestJournalSeedAnswersTheFirstRead: a post that takes the lease seeds its runner's journal with
// what it appended. The next Since from just before the seed returns the seed without reading the
// log (a commit made after the post is not in it, as it would not be in a read made at the post's
// commit) and leaves the journal's head as a read would; the seed is used once. A seed that does
// not begin right after the cursor is ignored: the journal reads.
func TestJournalSeedAnswersTheFirstRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, tenant := newStore(t, pgstore.StoreConfig{})
	q, err := pgstore.NewQueue(st, pgstore.QueueConfig{InsertOnly: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sid := newSession(t, st, tenant).ID
	owner := uuid.New()
	posted, err := postFollowup(st, q, tenant, sid, &pgstore.LeaseOffer{Owner: owner, TTL: time.Minute})
	if err != nil || !posted.Leased || len(posted.Events) != 1 || posted.Events[0].Seq != 0 {
		t.Fatalf("post: %+v, %v", posted, err)
	}
	// Another writer commits after the post (an inject).
	later := llm.NewUserMessage(uuid.NewString(), "later")
	if _, err := st.Journal(nil, tenant, sid, uuid.Nil).Append(ctx, func(h eventlog.Head) ([]eventlog.NewEvent, error) {
		return []eventlog.NewEvent{eventlog.Of(eventlog.Insertion(eventlog.InboxNextStep, h.Inbox.NextStep, later))}, nil
	}); err != nil {
		t.Fatal(err)
	}

	j := st.Journal(nil, tenant, sid, owner)
	j.Seed(posted.Events)
	evs, err := j.Since(ctx, -1)
	if err != nil || len(evs) != 1 || evs[0].Seq != 0 || evs[0].Type != eventlog.TypeInboxSpliced {
		t.Fatalf("seeded read: %d events %v; want the post's splice only", len(evs), err)
	}
	if got := j.Latest(); got != 0 {
		t.Fatalf("Latest after the seeded read: %d, want 0", got)
	}
	// The seed is spent: the next read reads the log, and an append fenced by the lease at the
	// head the read left works.
	evs, err = j.Since(ctx, 0)
	if err != nil || len(evs) != 1 || evs[0].Seq != 1 {
		t.Fatalf("read after the seed: %d events %v; want the later splice", len(evs), err)
	}
	if _, err := j.Append(ctx, func(h eventlog.Head) ([]eventlog.NewEvent, error) {
		if h.Next != 2 || h.Inbox.NextTurn != 1 || h.Inbox.NextStep != 1 {
			t.Errorf("head after the reads: %+v", h)
		}
		return []eventlog.NewEvent{eventlog.Of(eventlog.TurnStart{Turn: 1})}, nil
	}); err != nil {
		t.Fatalf("append after the reads: %v", err)
	}

	// A seed that does not begin right after the cursor is not used.
	j2 := st.Journal(nil, tenant, sid, uuid.Nil)
	j2.Seed(evs)
	all, err := j2.Since(ctx, -1)
	if err != nil || len(all) != 3 {
		t.Fatalf("read with a seed that leaves a gap: %d events %v; want the whole log of 3", len(all), err)
	}
}
