package pgstore_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	et "github.com/dshd/dshd/pkg/eventlog/eventlogtest"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/pgstore"
)

// TestPendingBytesFollowTheInbox (issue 9, finding 2): the counter row keeps the size of
// every waiting message (the one append statement: insertions at the end, claims from the front,
// a cancel's clearing), a fork recomputes them, and a post beyond the inbox bound is refused in
// its transaction, appending nothing.
func TestPendingBytesFollowTheInbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, tenant := newStore(t, pgstore.StoreConfig{})
	sid := newSession(t, st, tenant).ID
	size := func(m llm.Message) int64 {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return int64(len(b))
	}
	want := func(msgs int, bytes int64) {
		t.Helper()
		n, b, err := st.InboxPending(ctx, tenant, sid)
		if err != nil || n != msgs || b != bytes {
			t.Fatalf("pending %d messages, %d bytes (%v); want %d, %d", n, b, err, msgs, bytes)
		}
	}
	bound := pgstore.InboxBound{Messages: 4, Bytes: 10_000}
	post := func(target string, m llm.Message) error {
		_, err := st.Post(ctx, pgstore.PostParams{Tenant: tenant, Session: sid, Message: m.ID, Bound: bound,
			Build: func(h eventlog.Head) ([]eventlog.NewEvent, error) {
				return []eventlog.NewEvent{eventlog.Of(eventlog.Insertion(target, h.Inbox.Len(target), m))}, nil
			}})
		return err
	}
	a, b, c := et.UserMsg("a", strings.Repeat("a", 1000)), et.UserMsg("b", "bb"), et.UserMsg("c", strings.Repeat("c", 3000))
	for _, m := range []llm.Message{a, b} {
		if err := post(eventlog.InboxNextTurn, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := post(eventlog.InboxNextStep, c); err != nil {
		t.Fatal(err)
	}
	want(3, size(a)+size(b)+size(c))
	if err := post(eventlog.InboxNextStep, et.UserMsg("d", strings.Repeat("d", 6000))); fault.Code(err) != fault.InboxFull {
		t.Fatalf("a post beyond the byte bound: %v", err)
	}
	want(3, size(a)+size(b)+size(c))
	// A runner's claim: the first next-turn message and every next-step one, in one batch.
	if _, err := appendEvents(st, ctx, tenant, sid, et.TurnStart(1),
		et.NE("agent/inbox/spliced", eventlog.Deletion(eventlog.InboxNextStep, 1, "")),
		et.NE("agent/inbox/spliced", eventlog.Deletion(eventlog.InboxNextTurn, 1, "")), et.TurnEnd(1)); err != nil {
		t.Fatal(err)
	}
	want(1, size(b))
	for _, id := range []string{"e", "f", "g"} {
		if err := post(eventlog.InboxNextTurn, et.UserMsg(id, id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := post(eventlog.InboxNextTurn, et.UserMsg("h", "h")); fault.Code(err) != fault.InboxFull {
		t.Fatalf("a post beyond the count bound: %v", err)
	}
	want(4, size(b)+3*size(et.UserMsg("e", "e")))
	child, err := st.Fork(ctx, tenant, sid, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, bytes, err := st.InboxPending(ctx, tenant, child.ID); err != nil || n != 0 || bytes != 0 {
		t.Fatalf("the fork's inbox: %d, %d (%v); want empty", n, bytes, err)
	}
	// A cancel clears both lists.
	if _, err := appendEvents(st, ctx, tenant, sid,
		et.NE("agent/inbox/spliced", eventlog.Deletion(eventlog.InboxNextTurn, 4, eventlog.OutcomeCanceled))); err != nil {
		t.Fatal(err)
	}
	want(0, 0)
}
