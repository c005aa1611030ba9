package api

import (
	"context"
	"errors"
	"sync"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
)

// tailBytes bounds the frames a tail keeps, whatever their number.
const tailBytes = 8 << 20

// tails shares one reader per followed session among this replica's streams: on every hub
// wake-up the reader reads the new rows once and keeps the most recent events; streams
// that are caught up take their events from it instead of each reading the database (Config.
// StreamTailBuffer events are kept). A stream
// behind the buffer (a resume from far back, a slow client) reads the database itself, so a slow
// client still only slows itself.
//
// Lock order: tails.mu before tail.mu; neither is held during I/O.
type tails struct {
	log  *pgstore.Store
	hub  Subscriber
	keep int // events kept per tail

	mu sync.Mutex
	m  map[uuid.UUID]*tail
}

// tail is the shared reader of one session.
type tail struct {
	id, tenant uuid.UUID
	refs       int // guarded by tails.mu
	stop       context.CancelFunc
	keep       int

	mu     sync.Mutex
	buf    []eventlog.Event // recent events, contiguous seqs ending at last
	frames [][]byte         // their encoded SSE frames
	bytes  int              // total size of frames
	last   int64            // the last seq read
	err    error            // set when reading failed for good (the session was deleted)
	notify chan struct{}    // closed when events arrive or err is set
}

// acquire returns the shared tail of a session whose log ends at lastSeq, starting its reader if
// needed. The caller has checked that tenant owns the session; release undoes acquire.
func (ts *tails) acquire(tenant, id uuid.UUID, lastSeq int64) *tail {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if t, ok := ts.m[id]; ok {
		t.refs++
		return t
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &tail{id: id, tenant: tenant, refs: 1, stop: cancel, keep: ts.keep, last: lastSeq, notify: make(chan struct{})}
	ts.m[id] = t
	go ts.follow(ctx, t)
	return t
}

func (ts *tails) release(t *tail) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if t.refs--; t.refs == 0 {
		delete(ts.m, t.id)
		t.stop()
	}
}

// follow keeps the tail's buffer up to date with the log (eventlog.Follow over an unfenced
// journal of the session: woken by the hub, a read on a heartbeat or reconnect) until the last
// stream releases it or the session is gone. Batches this replica committed arrive through
// publish first and move the cursor, so they are not read back.
func (ts *tails) follow(ctx context.Context, t *tail) {
	j := ts.log.Journal(ts.hub, t.tenant, t.id, uuid.Nil)
	err := eventlog.Follow(ctx, j, t.lastSeq, func(evs []eventlog.Event) error {
		t.add(evs)
		return nil
	})
	if errors.Is(err, eventlog.ErrNotFound) {
		t.fail(err)
	}
}

// publish takes a batch this process committed to a followed session, when it continues the
// session's tail: the streams get it without a database read.
func (ts *tails) publish(tenantID, sessionID uuid.UUID, evs []eventlog.Event) {
	ts.mu.Lock()
	t := ts.m[sessionID]
	ts.mu.Unlock()
	if t != nil && t.tenant == tenantID && len(evs) > 0 {
		t.extend(evs)
	}
}

// gone ends the streams of a session this replica deleted: its tail fails as if its next read had
// found the session gone.
func (ts *tails) gone(sessionID uuid.UUID) {
	ts.mu.Lock()
	t := ts.m[sessionID]
	ts.mu.Unlock()
	if t != nil {
		t.fail(eventlog.ErrNotFound)
	}
}

func (t *tail) add(evs []eventlog.Event) { t.extend(evs) }

// extend appends the events of evs that continue the buffer: those the tail already has (a batch
// published in process and read back, or the other way round) are dropped, and a batch that
// would leave a gap is refused. It reports whether anything was added.
func (t *tail) extend(evs []eventlog.Event) bool {
	frames := make([][]byte, len(evs))
	for i, ev := range evs {
		frames[i] = encodeFrame(ev)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	skip := 0
	for skip < len(evs) && evs[skip].Seq <= t.last {
		skip++
	}
	evs, frames = evs[skip:], frames[skip:]
	if t.err != nil || len(evs) == 0 || evs[0].Seq != t.last+1 {
		return false
	}
	t.buf = append(t.buf, evs...)
	t.frames = append(t.frames, frames...)
	for _, f := range frames {
		t.bytes += len(f)
	}
	// Keep at most t.keep events and tailBytes of frames, but always the newest event.
	drop := max(0, len(t.buf)-t.keep)
	for i := range drop {
		t.bytes -= len(t.frames[i])
	}
	for t.bytes > tailBytes && drop < len(t.buf)-1 {
		t.bytes -= len(t.frames[drop])
		drop++
	}
	if drop > 0 {
		t.buf = append(t.buf[:0:0], t.buf[drop:]...)
		t.frames = append(t.frames[:0:0], t.frames[drop:]...)
	}
	t.last = evs[len(evs)-1].Seq
	close(t.notify)
	t.notify = make(chan struct{})
	return true
}

func (t *tail) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.err = err
	close(t.notify)
	t.notify = make(chan struct{})
}

// bufferedBytes returns the size of the frames the tail keeps.
func (t *tail) bufferedBytes() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bytes
}

// lastSeq returns the last seq the tail has read.
func (t *tail) lastSeq() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// since returns the buffered events after cursor and their frames. ok is false when cursor is behind the buffer
// (read the database); when nothing is new, evs is empty and changed is closed when that changes.
func (t *tail) since(cursor int64) (evs []eventlog.Event, frames [][]byte, ok bool, changed <-chan struct{}, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return nil, nil, true, nil, t.err
	}
	if cursor >= t.last {
		return nil, nil, true, t.notify, nil
	}
	if len(t.buf) == 0 || cursor+1 < t.buf[0].Seq {
		return nil, nil, false, t.notify, nil
	}
	from := cursor + 1 - t.buf[0].Seq
	return t.buf[from:], t.frames[from:], true, t.notify, nil
}
