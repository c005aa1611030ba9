package pgstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dshd/dshd/pkg/eventlog"
)

// idleSeqs remembers, per session, the last seq of a commit of this store that left the session
// idle (a new session, a turn's last append that released the lease): where the next post to it
// expects the log to end. Any other commit of the session this store makes forgets it. It is a
// guess, checked by the post's statement (postIdle), so a stale entry costs one refused
// statement, never a wrong append.
type idleSeqs struct {
	mu sync.Mutex
	m  map[uuid.UUID]int64
}

// maxIdleSeqs bounds the remembered sessions; past it the map starts again empty.
const maxIdleSeqs = 1 << 16

func (c *idleSeqs) set(id uuid.UUID, last int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxIdleSeqs {
		c.m = make(map[uuid.UUID]int64)
	}
	c.m[id] = last
}

func (c *idleSeqs) forget(id uuid.UUID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}

func (c *idleSeqs) get(id uuid.UUID) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	last, ok := c.m[id]
	return last, ok
}

// postIdleSQL calls dshd_post_idle (migration 00019).
const postIdleSQL = `SELECT last_seq, preset_id, preset_version, lease_until FROM dshd_post_idle(
	$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)`

// noSlotCode is the SQLSTATE dshd_post_idle raises when the tenant has no free turn slot.
const noSlotCode = "DS001"

// postIdle is Post's fast path, one statement: a waking post that offers to take the lease, to a
// session this store expects idle (idleSeqs), without an idempotency key or a Prepare. ok is
// false when the path does not apply or the statement found the session otherwise (it wrote
// nothing): the caller posts the general way. An error is the statement's (its outcome, for a
// lost reply, unknown as a failed commit's is).
func (s *Store) postIdle(ctx context.Context, p PostParams) (_ Posted, ok bool, _ error) {
	if p.Idem != nil || p.Prepare != nil || p.WakeIf != nil || p.Queue == nil || p.Lease == nil {
		return Posted{}, false, nil
	}
	last, known := s.idle.get(p.Session)
	if !known {
		return Posted{}, false, nil
	}
	h := eventlog.Head{Next: last + 1}
	ap, err := s.buildAt(ctx, s.pool, p.Tenant, p.Session, h, nil, p.Build)
	if err != nil || len(ap.Batch) == 0 || usageRows(ap.Batch) != nil || hookRows(p.Session, ap.Batch, false) != nil {
		return Posted{}, false, nil
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
	err = s.pool.QueryRow(ctx, postIdleSQL, p.Session, p.Tenant, last, c.times, c.types, c.datas, c.ops, c.srcs,
		c.ignorable, ap.Inbox.NextTurn, ap.Inbox.NextStep, z.turn.inserted, z.step.inserted, batchBytes(ap.Batch),
		l.Owner, l.TTL.Milliseconds(), max(l.MaxTenant, 0), from, p.Runnable).Scan(&got, &preset, &version, &until)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == noSlotCode {
		return Posted{}, false, nil
	}
	if err != nil {
		return Posted{}, false, translate(err, "post")
	}
	if got == nil {
		s.idle.forget(p.Session)
		return Posted{}, false, nil
	}
	out := Posted{MessageID: p.Message, Seq: ap.Batch[0].Seq, Events: ap.Batch, Leased: true, Preset: preset}
	if version != nil {
		out.PresetVersion = int(*version)
	}
	out.Head = eventlog.Head{Next: *got + 1, Inbox: ap.Inbox,
		Lease: eventlog.Lease{Owner: l.Owner.String(), Until: s.now().Add(l.TTL)}}
	s.committed(p.Tenant, p.Session, out.Events)
	return out, true, nil
}

// inflight counts, per session, this store's commits that are being sent or published (Append,
// Post): a follower woken by the notification of such a commit waits for its publication
// (OnCommit) instead of reading back what its committer is about to hand over (Journal.Wait).
type inflight struct {
	mu sync.Mutex
	m  map[uuid.UUID]*flight
}

type flight struct {
	n    int
	done chan struct{}
}

func (f *inflight) begin(id uuid.UUID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = make(map[uuid.UUID]*flight)
	}
	fl := f.m[id]
	if fl == nil {
		fl = &flight{done: make(chan struct{})}
		f.m[id] = fl
	}
	fl.n++
}

func (f *inflight) end(id uuid.UUID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl := f.m[id]; fl != nil {
		if fl.n--; fl.n == 0 {
			close(fl.done)
			delete(f.m, id)
		}
	}
}

// settled returns a channel closed once the session has no commit of this store in flight, nil
// when it has none now.
func (f *inflight) settled(id uuid.UUID) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl := f.m[id]; fl != nil {
		return fl.done
	}
	return nil
}
