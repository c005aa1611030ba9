package eventlog_test

import (
	"context"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
)

func TestZZReview_ForkInheritsSeedInbox(t *testing.T) {
	ctx := context.Background()
	st, _, tenant := newStore(t, eventlog.StoreConfig{})
	sess := newSession(t, st, tenant)
	ins := ne("agent/inbox/spliced", map[string]any{"target": "next-turn", "start": 0, "inserted": []any{userMsg("m1", "hi")}})
	if _, err := st.EventAppend(ctx, tenant, sess.ID, turnStart(1), turnEnd(1), ins); err != nil {
		t.Fatal(err)
	}
	child, err := st.Fork(ctx, tenant, sess.ID, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := st.SessionHead(ctx, tenant, child.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("child head %+v seedLength %v", h, *child.Header.SeedLength)
	if h.Inbox.NextTurn != 0 {
		t.Fatalf("the fork's inbox holds %d parent message(s) from the seed (LOOP-1: replay splices after seedLength), and no job serves them", h.Inbox.NextTurn)
	}
}
