package pgstore_test

import (
	"context"

	et "github.com/dshd/dshd/pkg/eventlog/eventlogtest"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// appendEvents appends evs to the session through an unfenced journal, as an HTTP handler does.
func appendEvents(st *pgstore.Store, ctx context.Context, tenant, session uuid.UUID, evs ...eventlog.NewEvent) ([]eventlog.Event, error) {
	return st.Journal(nil, tenant, session, uuid.Nil).Append(ctx, func(eventlog.Head) ([]eventlog.NewEvent, error) {
		return evs, nil
	})
}

// appendTx appends evs inside the caller's transaction.
func appendTx(st *pgstore.Store, ctx context.Context, tx pgx.Tx, tenant, session uuid.UUID, evs ...eventlog.NewEvent) ([]eventlog.Event, error) {
	return st.AppendTx(ctx, tx, tenant, session, func(eventlog.Head) ([]eventlog.NewEvent, error) { return evs, nil })
}

// repair closes the session's open turn as a turn runner does (SES-14): it reads the log,
// computes the closers and appends them through the journal, with the last event's time.
func repair(st *pgstore.Store, ctx context.Context, tenant, session uuid.UUID) ([]eventlog.Event, error) {
	j := st.Journal(nil, tenant, session, uuid.Nil)
	all, err := j.Since(ctx, -1)
	if err != nil {
		return nil, err
	}
	closers := eventlog.Closers(all)
	if len(closers) == 0 {
		return nil, nil
	}
	evs := make([]eventlog.NewEvent, len(closers))
	for i, c := range closers {
		evs[i] = et.AsNew(c)
		evs[i].Time = c.Time
	}
	return j.Append(ctx, func(h eventlog.Head) ([]eventlog.NewEvent, error) {
		if h.Next != closers[0].Seq {
			return nil, eventlog.ErrStale
		}
		return evs, nil
	})
}
