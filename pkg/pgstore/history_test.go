package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	et "github.com/dshd/dshd/pkg/eventlog/eventlogtest"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/google/uuid"
)

// TestHistoryPages: walking the history a page at a time, by count or by bytes,
// gives exactly DeriveMessages for every reference log (replacements included); a walk keeps the
// history of its first page while the session grows; forged cursors are refused.
func TestHistoryPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, tenant := newStore(t, pgstore.StoreConfig{})
	walk := func(t *testing.T, sess eventlog.Session, q pgstore.HistoryQuery) []llm.Message {
		t.Helper()
		var all []llm.Message
		for pages := 0; ; pages++ {
			msgs, next, err := st.HistoryPage(ctx, tenant, sess.ID, q)
			if err != nil {
				t.Fatal(err)
			}
			if pages > 1000 {
				t.Fatal("the walk does not end")
			}
			all = append(all, msgs...)
			if next == "" {
				return all
			}
			q.Cursor = next
		}
	}
	for name, evs := range et.ReferenceLogs(t, "../eventlog/testdata") {
		sess := newSession(t, st, tenant)
		batch := make([]eventlog.NewEvent, len(evs))
		for i := range evs {
			batch[i] = et.AsNew(evs[i])
		}
		if _, err := appendEvents(st, ctx, tenant, sess.ID, batch...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, err := st.DeriveMessages(ctx, tenant, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		wantJS, _ := json.Marshal(want)
		for _, q := range []pgstore.HistoryQuery{{}, {Limit: 1}, {Limit: 2}, {Limit: 3}, {MaxBytes: 1}, {MaxBytes: 300}, {Limit: 2, MaxBytes: 500}} {
			got, _ := json.Marshal(walk(t, sess, q))
			if string(got) != string(wantJS) {
				t.Errorf("%s %+v: pages give\n%s\nwant\n%s", name, q, got, wantJS)
			}
		}
	}

	sess := newSession(t, st, tenant)
	if _, err := appendEvents(st, ctx, tenant, sess.ID, et.TurnStart(1), et.User("u1", "one"), et.User("u2", "two"), et.User("u3", "three")); err != nil {
		t.Fatal(err)
	}
	first, next, err := st.HistoryPage(ctx, tenant, sess.ID, pgstore.HistoryQuery{Limit: 2})
	if err != nil || len(first) != 2 || first[0].ID != "u1" || next == "" {
		t.Fatalf("first page %v %q %v", first, next, err)
	}
	if _, err := appendEvents(st, ctx, tenant, sess.ID, et.User("u4", "four")); err != nil {
		t.Fatal(err)
	}
	rest, after, err := st.HistoryPage(ctx, tenant, sess.ID, pgstore.HistoryQuery{Cursor: next, Limit: 2})
	if err != nil || len(rest) != 1 || rest[0].ID != "u3" || after != "" {
		t.Fatalf("the walk's second page %v %q %v, want u3 alone (u4 came after the walk began)", rest, after, err)
	}
	other := newSession(t, st, tenant)
	for _, c := range []string{"x", "%%", next + "A", "aDMuMA", "aDMuLTE", "aDMuMDI", "aC01LjE", "aDUuMQ", "aDE", "aCszLjE", "eDMuMQ"} {
		if _, _, err := st.HistoryPage(ctx, tenant, sess.ID, pgstore.HistoryQuery{Cursor: c}); fault.Code(err) != fault.Invalid {
			t.Errorf("cursor %q: %v, want invalid_request", c, err)
		}
	}
	if _, _, err := st.HistoryPage(ctx, tenant, other.ID, pgstore.HistoryQuery{Cursor: next}); fault.Code(err) != fault.Invalid {
		t.Errorf("another session's cursor: %v", err)
	}
	if _, _, err := st.HistoryPage(ctx, tenant, sess.ID, pgstore.HistoryQuery{Cursor: fmt.Sprint(next)}); err != nil {
		t.Errorf("the cursor again: %v", err)
	}
	if _, _, err := st.HistoryPage(ctx, tenant, uuid.New(), pgstore.HistoryQuery{}); !errors.Is(err, pgstore.ErrNotFound) {
		t.Errorf("unknown session: %v", err)
	}
}

// TestEventPagesBoundedByBytes: ListQuery.MaxBytes ends a page with the event at
// which its data reaches the budget (one event at least), and paging with it reads every event.
func TestEventPagesBoundedByBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, tenant := newStore(t, pgstore.StoreConfig{})
	sess := newSession(t, st, tenant)
	var evs []eventlog.NewEvent
	for i := range 10 {
		evs = append(evs, et.Raw("assistant/chunk", fmt.Sprintf(`{"turn":1,"step":1,"chunk":{"type":"text-delta","text":"%04d%s"}}`, i, strings.Repeat("x", 940))))
	}
	if _, err := appendEvents(st, ctx, tenant, sess.ID, append([]eventlog.NewEvent{et.TurnStart(1), et.StepStart(1, 1)}, evs...)...); err != nil {
		t.Fatal(err)
	}
	page, err := st.EventList(ctx, tenant, sess.ID, pgstore.ListQuery{After: 1, Limit: 100, MaxBytes: 2500})
	if err != nil || len(page) != 3 {
		t.Fatalf("a 2500-byte page of 1000-byte events: %d events, %v; want 3 (the third crosses the budget)", len(page), err)
	}
	if page, err = st.EventList(ctx, tenant, sess.ID, pgstore.ListQuery{After: 1, Limit: 100, MaxBytes: 1}); err != nil || len(page) != 1 {
		t.Fatalf("a 1-byte page: %d events, %v; want one", len(page), err)
	}
	var seqs []int64
	for after := int64(-1); ; {
		page, err := st.EventList(ctx, tenant, sess.ID, pgstore.ListQuery{After: after, Limit: 4, MaxBytes: 1500})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, ev := range page {
			seqs = append(seqs, ev.Seq)
		}
		after = page[len(page)-1].Seq
	}
	if fmt.Sprint(seqs) != "[0 1 2 3 4 5 6 7 8 9 10 11]" {
		t.Fatalf("paged by bytes: %v", seqs)
	}
}
