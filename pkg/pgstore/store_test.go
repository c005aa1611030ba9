package pgstore_test

import (
	"context"
	"errors"
	"testing"

	et "github.com/dshd/dshd/pkg/eventlog/eventlogtest"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dshd/dshd/internal/pgtest"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newStore returns a store on a fresh database and a tenant in it.
func newStore(t testing.TB, cfg pgstore.StoreConfig) (*pgstore.Store, *pgxpool.Pool, uuid.UUID) {
	t.Helper()
	pool := pgtest.Pool(t)
	return pgstore.NewStore(pool, cfg), pool, newTenant(t, pool)
}

func newTenant(t testing.TB, pool *pgxpool.Pool) uuid.UUID {
	t.Helper()
	id := uuid.New()
	if _, err := pool.Exec(context.Background(), `INSERT INTO tenants (id, name) VALUES ($1, 't')`, id); err != nil {
		t.Fatal(err)
	}
	return id
}

func newSession(t testing.TB, st *pgstore.Store, tenant uuid.UUID) eventlog.Session {
	t.Helper()
	sess, err := st.SessionCreate(context.Background(), tenant, pgstore.SessionParams{})
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

func TestStoreAppendAndList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, tenant := newStore(t, pgstore.StoreConfig{})
	sess := newSession(t, st, tenant)
	if sess.LastSeq != -1 || sess.Header.Owner != tenant.String() || sess.Header.ID != sess.ID.String() {
		t.Fatalf("new session = %+v", sess)
	}
	got, err := appendEvents(st, ctx, tenant, sess.ID, eventlog.NewEvent{Type: "turn/start", Data: map[string]int{"turn": 1}},
		eventlog.NewEvent{Type: "user/message", Data: et.UserMsg("m1", "hi"), SurfaceOp: eventlog.Append})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Seq != 0 || got[1].Seq != 1 {
		t.Fatalf("append = %+v", got)
	}
	list, err := st.EventList(ctx, tenant, sess.ID, pgstore.ListQuery{After: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || string(list[1].Data) != string(got[1].Data) || list[1].SurfaceOp == nil || list[0].SurfaceOp != nil {
		t.Fatalf("list = %+v", list)
	}
	again, err := st.SessionGet(ctx, tenant, sess.ID)
	if err != nil || again.LastSeq != 1 {
		t.Fatalf("get = %+v, %v", again, err)
	}
	if _, err := st.EventList(ctx, uuid.New(), sess.ID, pgstore.ListQuery{After: -1}); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("other tenant list: %v", err)
	}
}
