package api

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
)

// tails shares one reader per followed session among this replica's streams: on every hub
// wake-up the reader reads the new rows once and keeps the most recent events; streams
// that are caught up take their events from it instead of each reading the database (Config.
// StreamTailBuffer events are kept). A stream
// behind the buffer (a resume from far back, a slow client) reads the database itself, so a slow
// client still only slows itself.
//
// Lock order: tails.mu before tail.mu; neither is held during I/O.
type tails struct {
	log       *eventlog.Store
	hub       Subscriber
	heartbeat time.Duration
	page      int
	keep      int // events kept per tail

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
	wake, unsub := ts.hub.Subscribe(id)
	go func() {
		defer unsub()
		ts.follow(ctx, t, wake)
	}()
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

// follow reads new rows after every wake-up (and heartbeat, in case a notification was lost).
func (ts *tails) follow(ctx context.Context, t *tail, wake <-chan struct{}) {
	beat := time.NewTicker(ts.heartbeat)
	defer beat.Stop()
	for {
		if !ts.read(ctx, t) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-beat.C:
		}
	}
}

// read appends every committed event after t.last to the buffer; false when the tail failed.
func (ts *tails) read(ctx context.Context, t *tail) bool {
	for {
		t.mu.Lock()
		after := t.last
		t.mu.Unlock()
		evs, err := ts.log.EventList(ctx, t.tenant, t.id, eventlog.ListQuery{After: after, Limit: ts.page})
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			if errors.Is(err, eventlog.ErrNotFound) {
				t.fail(err)
				return false
			}
			return true // a passing failure: the next wake-up or heartbeat reads again
		}
		if len(evs) == 0 {
			return true
		}
		t.add(evs)
		if len(evs) < ts.page {
			return true
		}
	}
}

func (t *tail) add(evs []eventlog.Event) {
	frames := make([][]byte, len(evs))
	for i, ev := range evs {
		frames[i] = encodeFrame(ev)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, evs...)
	t.frames = append(t.frames, frames...)
	if n := len(t.buf) - t.keep; n > 0 {
		t.buf = append(t.buf[:0:0], t.buf[n:]...)
		t.frames = append(t.frames[:0:0], t.frames[n:]...)
	}
	t.last = evs[len(evs)-1].Seq
	close(t.notify)
	t.notify = make(chan struct{})
}

func (t *tail) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.err = err
	close(t.notify)
	t.notify = make(chan struct{})
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
