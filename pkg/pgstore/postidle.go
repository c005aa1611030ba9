package pgstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dshd/dshd/pkg/eventlog"
)

// postIdleSQL calls dshd_post_idle (migration 00019).
const postIdleSQL = `SELECT last_seq, preset_id, preset_version, lease_until FROM dshd_post_idle(
	$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)`

// noSlotCode is the SQLSTATE dshd_post_idle raises when the tenant has no free turn slot.
const noSlotCode = "DS001"

// postIdle is Post's fast path, one statement (dshd_post_idle): a waking post that offers to take
// the lease, without an idempotency key or a Prepare, to a session that is idle (both inbox lists
// empty, no lease recorded). What such a post appends does not depend on the head but for its
// seqs, so the batch is built for an empty inbox and the statement gives it the seqs after the
// log's end. ok is false when the path does not apply or the statement found the session
// otherwise (it wrote nothing): the caller posts the general way. An error is the statement's
// (its outcome, for a lost reply, unknown as a failed commit's is).
func (s *Store) postIdle(ctx context.Context, p PostParams) (_ Posted, ok bool, _ error) {
	if p.Busy || s.check || p.Idem != nil || p.Prepare != nil || p.WakeIf != nil || p.Queue == nil || p.Lease == nil {
		return Posted{}, false, nil
	}
	// The seqs are placeholders until the statement returns the log's end; the batch's events
	// cite none (a splice does not), as the check below makes sure.
	ap, err := s.buildAt(ctx, s.pool, p.Tenant, p.Session, eventlog.Head{}, nil, p.Build)
	if err != nil || len(ap.Batch) == 0 || usageRows(ap.Batch) != nil || hookRows(p.Session, ap.Batch, false) != nil {
		return Posted{}, false, nil
	}
	for _, ev := range ap.Batch {
		if ev.SourceEventSeqs != nil || ev.SurfaceOp != nil && ev.SurfaceOp != eventlog.Append {
			return Posted{}, false, nil
		}
	}
	z := inboxSizes(ap.Batch)
	if z.turn.removed+z.step.removed > 0 {
		return Posted{}, false, nil
	}
	if p.Bound.Bytes > 0 {
		added := int64(0)
		for _, n := range append(z.turn.inserted, z.step.inserted...) {
			added += int64(n)
		}
		if added > p.Bound.Bytes {
			return Posted{}, false, nil // the general path tells whether the bound applies
		}
	}
	c := toColumns(ap.Batch)
	l := p.Lease
	from := 0
	if l.MaxTenant > 0 {
		from = rand.IntN(l.MaxTenant)
	}
	var (
		got     *int64
		preset  *uuid.UUID
		version *int32
		until   *time.Time
	)
	err = s.pool.QueryRow(ctx, postIdleSQL, [16]byte(p.Session), [16]byte(p.Tenant), nil, c.times, c.types, c.datas,
		c.ops, c.srcs, c.ignorable, ap.Inbox.NextTurn, ap.Inbox.NextStep, z.turn.inserted, z.step.inserted,
		batchBytes(ap.Batch), [16]byte(l.Owner), l.TTL.Milliseconds(), max(l.MaxTenant, 0), from, p.Runnable).
		Scan(&got, &preset, &version, &until)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == noSlotCode {
		return Posted{}, false, nil
	}
	if err != nil {
		return Posted{}, false, translate(err, "post")
	}
	if got == nil {
		return Posted{}, false, nil
	}
	eventlog.Stamp(ap.Batch, *got-int64(len(ap.Batch))+1, 0)
	out := Posted{MessageID: p.Message, Seq: ap.Batch[0].Seq, Events: ap.Batch, Leased: true, Preset: preset}
	if version != nil {
		out.PresetVersion = int(*version)
	}
	out.Head = eventlog.Head{Next: *got + 1, Inbox: ap.Inbox,
		Lease: eventlog.Lease{Owner: l.Owner.String(), Until: s.now().Add(l.TTL)}}
	s.committed(p.Tenant, p.Session, out.Events)
	return out, true, nil
}
