package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/telemetry"
)

// stream serves the session's log as server-sent events: every event with seq > q.after, in
// order, then live. Frames are `id: <seq>`, `event: <type>`, `data: <event JSON>`.
//
// The stream reads the database, never a process's memory of another replica: it backfills in
// pages, then follows the session's shared tail on this replica (tail.go), which reads each new
// row once after a hub wake-up (or its heartbeat, which doubles as a poll). The tail is acquired
// before the first read and starts from the session's last seq at that moment, so no commit can
// fall between the backfill and the tail. Frames of the tail are written as they are, shared by
// every stream of the session, never copied per stream. A client that reads slowly only delays
// its own stream; one whose write blocks for StreamWriteTimeout, or that falls StreamMaxLag
// behind the log once it had caught up, is disconnected and resumes with Last-Event-ID. The
// stream ends cleanly when the client goes away, the session is deleted, or the server closes
// (Close); one opened with an API key ends within a Heartbeat of the key's revocation, rotation
// or expiry (follower.checkKey).
//
// Once an HTTP/1 stream without an end (until nil) has caught up it is detached (detach): it takes
// over the connection and its handler returns, so that an idle subscriber costs a small goroutine,
// its connection and a watcher of the connection, not a parked net/http handler with its buffers.
// A message's stream, which ends with its turn, stays in its handler and keeps the connection
// alive for the client's next request.
//
// until, when not nil, ends the stream right after the first event for which it returns true
// (a message's stream ends with the turn that served it). release gives back the stream's place
// (reserveStream) when the stream ends.
//
// known, when not negative, is a committed seq of the session that the caller read or wrote in
// this request after it checked the tenant's session (a message's stream: the message's own
// seq): the tail starts there, and the session is not read again. Negative: the stream reads the
// session (its tenant, that it is live, its last seq).
//
// committed, when it begins right after q.after, are events this request committed (a message's
// own splice): they are the stream's first frames, sent with its header, without a read.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, id uuid.UUID, q eventQuery, known int64, committed []eventlog.Event, until func(eventlog.Event) bool, release func()) {
	s.streamAs(w, r, id, q, known, committed, until, release, nil)
}

// A translator writes a session's events in another protocol's terms (the AI SDK's UI message stream, AG-UI): each event
// becomes zero or more SSE frames, in order, with what it needs carried from one event to the
// next. A stream with a translator writes only the translator's frames, never the log's own.
type translator interface {
	// header sets the response headers the protocol asks for, before the first write.
	header(h http.Header)
	// event appends ev's frames to buf.
	event(buf *bytes.Buffer, ev eventlog.Event) error
	// end appends the frames that close a stream whose until event came.
	end(buf *bytes.Buffer) error
}

// streamAs is stream with the events written by tr (nil: the log's own frames).
func (s *Server) streamAs(w http.ResponseWriter, r *http.Request, id uuid.UUID, q eventQuery, known int64, committed []eventlog.Event, until func(eventlog.Event) bool, release func(), tr translator) {
	ctx := r.Context()
	tenant := tenantID(r)
	if known < 0 {
		sess, err := s.cfg.Log.SessionGet(ctx, tenant, id)
		if err != nil {
			release()
			writeError(w, r, err)
			return
		}
		known = sess.LastSeq
	}
	t := s.tails.acquire(tenant, id, known)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	if tr != nil {
		tr.header(h)
	}
	// A stream without an end (GET .../events) is detached once it has caught up, so that an idle
	// subscriber costs little; a detached stream closes its connection when it ends. A message's
	// stream ends with its turn: it stays in its handler and leaves the connection to the client's
	// next request, as a keep-alive exchange.
	detachable := r.ProtoMajor == 1 && until == nil
	if detachable {
		h.Set("Connection", "close")
	}
	w.WriteHeader(http.StatusOK)
	info(r).stream = true
	s.metrics.streams.Inc()
	rc := http.NewResponseController(w)
	st := &sseWriter{out: httpOut{w: w, rc: rc}, timeout: s.cfg.StreamWriteTimeout, m: s.metrics.ops, tr: tr}
	if until != nil {
		st.firstFrom = info(r).start // a streaming POST: its time to first event is measured
	}
	f := &follower{s: s, t: t, st: st,
		tenant: tenant, id: id, types: q.types, until: until, cursor: q.after,
		keyCheck: keyCheck(r), keyChecked: time.Now()}
	end := func() {
		s.tails.release(t)
		s.metrics.streams.Dec()
		release()
	}
	if len(committed) > 0 && committed[0].Seq == q.after+1 {
		done, err := st.send(committed, nil, q.types, until)
		if err != nil || done {
			if err != nil {
				s.streamEnded(r, err)
			}
			end()
			_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.StreamWriteTimeout))
			return
		}
		f.cursor = committed[len(committed)-1].Seq
	} else if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		end()
		return
	}
	parked, err := f.run(ctx, detachable)
	if parked && s.detach(w, r, rc, f, end) {
		return
	}
	if parked {
		_, err = f.run(ctx, false)
	}
	if err != nil {
		s.streamEnded(r, err)
	}
	end()
	// The end of the response (flushed after the handler returns) gets a deadline of its own; the
	// next request on the connection sets its own.
	_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.StreamWriteTimeout))
}

// detach hands a caught-up stream over to a goroutine of its own that owns the connection
// (hijacked), and returns true; the handler then returns. It returns false when the connection
// cannot be taken over (HTTP/2): the stream goes on in its handler.
func (s *Server) detach(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, f *follower, end func()) bool {
	s.closingMu.Lock()
	defer s.closingMu.Unlock()
	if s.closing {
		return false // closing: end in the handler, as usual
	}
	rec := s.recordOf(w, r)
	conn, _, err := rc.Hijack()
	if err != nil {
		return false
	}
	info(r).detached = true
	out := &connOut{conn: conn, chunked: r.ProtoAtLeast(1, 1)}
	f.st.out = out
	if s.detached == nil {
		s.detached = map[*connOut]struct{}{}
	}
	s.detached[out] = struct{}{}
	ctx, cancel := context.WithCancel(context.Background())
	s.streamsWG.Add(1)
	// The watcher: a client that closes its connection (or sends anything: nothing is expected
	// after the request) ends the stream. Closing the connection ends the watcher.
	go func() {
		var b [1]byte
		_, _ = conn.Read(b[:])
		cancel()
	}()
	go func() {
		defer s.streamsWG.Done()
		defer func() {
			s.closingMu.Lock()
			delete(s.detached, out)
			s.closingMu.Unlock()
			out.end(s.cfg.StreamWriteTimeout)
			cancel()
			end()
			s.record(rec, http.StatusOK, rec.bytes+out.written, time.Since(rec.ri.start))
		}()
		defer func() {
			// As observe does for handlers: a panic ends this stream, not the process.
			if p := recover(); p != nil {
				rec.ri.logger().Error("panic", slog.String("error", fmt.Sprint(p)), slog.String("stack", string(debug.Stack())))
			}
		}()
		_, err := f.run(ctx, false)
		if err != nil && ctx.Err() == nil {
			s.streamEndedDetached(rec.ri, err)
		}
	}()
	return true
}

// reserveOrRefuse takes a stream's place for session id of the request's tenant, or answers 429
// too_many_streams and returns false.
func (s *Server) reserveOrRefuse(w http.ResponseWriter, r *http.Request, id uuid.UUID) (release func(), ok bool) {
	release, err := s.reserveStream(tenantID(r), id)
	if err != nil {
		w.Header().Set("Retry-After", "5")
		writeError(w, r, err)
		return nil, false
	}
	return release, true
}

// errDropped ends a stream whose client reads slower than the log grows.
var errDropped = errors.New("the client fell more than the allowed lag behind the log; it resumes with Last-Event-ID")

// follower sends a session's events to one stream: backfill, then the shared tail.
type follower struct {
	s      *Server
	t      *tail
	st     *sseWriter
	tenant uuid.UUID
	id     uuid.UUID
	types  []string
	until  func(eventlog.Event) bool
	cursor int64
	live   bool // caught up with the tail once: from then on it may lag StreamMaxLag at most

	// keyCheck, when not nil, tells whether the stream's API key still holds (scopes.go): run
	// once a Heartbeat, it ends the stream of a key revoked, rotated or expired since.
	keyCheck   func(context.Context) error
	keyChecked time.Time
}

// checkKey runs keyCheck when a Heartbeat has passed since it last ran.
func (f *follower) checkKey(ctx context.Context) error {
	if f.keyCheck == nil || time.Since(f.keyChecked) < f.s.cfg.Heartbeat {
		return nil
	}
	f.keyChecked = time.Now()
	return f.keyCheck(ctx)
}

// run sends events until the stream ends: err is nil when it ended cleanly (until, the client
// went away, the server closed), else why it ended. With park, it returns parked instead of
// waiting the first time it has caught up with the tail.
func (f *follower) run(ctx context.Context, park bool) (parked bool, _ error) {
	s, t := f.s, f.t
	var heartbeat *time.Ticker
	defer func() {
		if heartbeat != nil {
			heartbeat.Stop()
		}
	}()
	for {
		if err := f.checkKey(ctx); err != nil {
			return false, err
		}
		evs, frames, ok, changed, err := t.since(f.cursor)
		if err != nil {
			return false, err
		}
		if !ok {
			if f.live && t.bufferedBytes() > s.cfg.StreamMaxLag {
				return false, errDropped
			}
			// Behind the shared buffer: read the database up to its end, which is at least the
			// tail's last seq read before (so a type filter that matched nothing skips it).
			lastBefore := t.lastSeq()
			cursor, done, err := s.backfill(ctx, f.st, f.tenant, f.id, f.cursor, f.types, f.until)
			if err != nil || done {
				return false, err
			}
			f.cursor = max(cursor, lastBefore)
			continue
		}
		if len(evs) > 0 {
			if f.live && pendingBytes(evs, frames, f.types) > s.cfg.StreamMaxLag {
				return false, errDropped
			}
			done, err := f.st.send(evs, frames, f.types, f.until)
			if err != nil || done {
				return false, err
			}
			f.cursor = evs[len(evs)-1].Seq
			continue
		}
		f.live = true
		if park {
			return true, nil
		}
		if heartbeat == nil {
			heartbeat = time.NewTicker(s.cfg.Heartbeat)
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-s.done:
			_ = f.st.closing() // the stream ends; its client comes back (to another replica)
			return false, nil
		case <-changed:
		case <-heartbeat.C:
			if err := f.st.comment(); err != nil {
				return false, err
			}
		}
	}
}

// pendingBytes is the size of the frames of evs a stream with the type filter types would send.
func pendingBytes(evs []eventlog.Event, frames [][]byte, types []string) int {
	n := 0
	for i, ev := range evs {
		if len(types) == 0 || slices.Contains(types, ev.Type) {
			if frames != nil && frames[i] != nil {
				n += len(frames[i])
			} else {
				n += len(ev.Data)
			}
		}
	}
	return n
}

// backfill sends every event after cursor that is committed now, a page at a time, and returns
// the new cursor; done reports that until ended the stream.
func (s *Server) backfill(ctx context.Context, st *sseWriter, tenant, id uuid.UUID, cursor int64, types []string, until func(eventlog.Event) bool) (_ int64, done bool, _ error) {
	for {
		// A page holds at most backfillBytes of data (and one event at least): a stream that
		// backfills holds that much of the log at a time, however large its events.
		evs, err := s.cfg.Log.EventList(ctx, tenant, id, pgstore.ListQuery{After: cursor, Limit: s.cfg.StreamPage, Types: types, MaxBytes: backfillBytes})
		if err != nil {
			return cursor, false, err
		}
		if len(evs) == 0 {
			return cursor, false, nil
		}
		// A page cut by its bytes reaches backfillBytes (it ends with the event that crosses it);
		// one short of both limits says the log has nothing more now.
		full := len(evs) == s.cfg.StreamPage || pageBytes(evs) >= backfillBytes
		if until != nil {
			for i, ev := range evs {
				if until(ev) {
					evs, done = evs[:i+1], true
					break
				}
			}
		}
		if err := st.events(evs); err != nil {
			return cursor, false, err
		}
		if done {
			if err := st.ended(); err != nil {
				return cursor, false, err
			}
		}
		cursor = evs[len(evs)-1].Seq
		if done || !full {
			return cursor, done, nil
		}
		select {
		case <-s.done:
			return cursor, false, nil
		default:
		}
	}
}

// pageBytes is the size of the events' data.
func pageBytes(evs []eventlog.Event) int {
	n := 0
	for _, ev := range evs {
		n += len(ev.Data)
	}
	return n
}

// streamEnded logs why a stream ended, unless the client simply went away.
func (s *Server) streamEnded(r *http.Request, err error) {
	if errors.Is(err, context.Canceled) || r.Context().Err() != nil {
		return
	}
	s.streamEndedDetached(info(r), err)
}

// streamEndedDetached logs why the stream of request ri ended.
func (s *Server) streamEndedDetached(ri *reqInfo, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	level := slog.LevelWarn
	if errors.Is(err, eventlog.ErrNotFound) || errors.Is(err, errDropped) || errors.Is(err, errKeyGone) {
		level = slog.LevelInfo // the session was deleted while streaming, the client was slow, or its key went
	}
	ri.logger().Log(context.Background(), level, "stream ended", slog.String("error", err.Error()))
}

// sseWriter writes server-sent event frames to one client, in batches of at most maxWriteBytes,
// each under a write deadline of its own.
type sseWriter struct {
	out     streamOut
	timeout time.Duration
	batch   [][]byte // frames to write: the tail's (shared, never changed) or this stream's own
	size    int      // bytes in batch
	nEvents int      // event frames in batch (not heartbeats)
	// m records the bytes and event frames written; firstFrom, when set, is the start of a
	// streaming POST, whose time to its first event frame is recorded once (then it is reset).
	m         *telemetry.Metrics
	firstFrom time.Time
	// tr, when not nil, writes the events in another protocol's frames (streamAs).
	tr    translator
	trBuf bytes.Buffer
}

// streamOut is where a stream's batches go: the handler's ResponseWriter, or the connection of a
// detached stream.
type streamOut interface {
	write(deadline time.Time, frames [][]byte) error
}

// maxWriteBytes is how much a stream writes under one write deadline; backfillBytes bounds the
// event data of a page a stream reads from the database.
const (
	maxWriteBytes = 64 << 10
	backfillBytes = 32 << 10
)

// send writes the events that pass the type filter, up to and including the first for which
// until is true (done then reports it). frames, when not nil, are the events' encoded frames
// (shared by the streams of a tail, so each event is encoded once per replica); they are written
// as they are, not copied.
func (st *sseWriter) send(evs []eventlog.Event, frames [][]byte, types []string, until func(eventlog.Event) bool) (done bool, err error) {
	if st.tr != nil {
		return st.translate(evs, types, until)
	}
	for i, ev := range evs {
		if len(types) == 0 || slices.Contains(types, ev.Type) {
			f := []byte(nil)
			if frames != nil {
				f = frames[i]
			}
			if f == nil {
				var b bytes.Buffer
				if err := appendFrame(&b, ev); err != nil {
					return false, err
				}
				f = b.Bytes()
			}
			st.nEvents++
			if err := st.put(f); err != nil {
				return false, err
			}
		}
		if until != nil && until(ev) {
			done = true
			break
		}
	}
	return done, st.flush()
}

// translate is send through the stream's translator: the events' frames are the translator's,
// and the until event is followed by the translator's end.
func (st *sseWriter) translate(evs []eventlog.Event, types []string, until func(eventlog.Event) bool) (done bool, err error) {
	for _, ev := range evs {
		if len(types) == 0 || slices.Contains(types, ev.Type) {
			st.trBuf.Reset()
			if err := st.tr.event(&st.trBuf, ev); err != nil {
				return false, err
			}
			st.nEvents++
			if st.trBuf.Len() > 0 {
				if err := st.put(bytes.Clone(st.trBuf.Bytes())); err != nil {
					return false, err
				}
			}
		}
		if until != nil && until(ev) {
			done = true
			if err := st.ended(); err != nil {
				return false, err
			}
			break
		}
	}
	return done, st.flush()
}

// ended writes (and flushes) the translator's end frames, if the stream has a translator.
func (st *sseWriter) ended() error {
	if st.tr == nil {
		return nil
	}
	st.trBuf.Reset()
	if err := st.tr.end(&st.trBuf); err != nil {
		return err
	}
	if st.trBuf.Len() > 0 {
		if err := st.put(bytes.Clone(st.trBuf.Bytes())); err != nil {
			return err
		}
	}
	return st.flush()
}

// events writes one frame per event and flushes them together.
func (st *sseWriter) events(evs []eventlog.Event) error {
	_, err := st.send(evs, nil, nil, nil)
	return err
}

// put adds a frame to the batch, writing the batch once it holds maxWriteBytes.
func (st *sseWriter) put(f []byte) error {
	st.batch = append(st.batch, f)
	if st.size += len(f); st.size >= maxWriteBytes {
		return st.flush()
	}
	return nil
}

// flush writes the batch and forgets its frames.
func (st *sseWriter) flush() error {
	if len(st.batch) == 0 {
		return nil
	}
	err := st.out.write(time.Now().Add(st.timeout), st.batch)
	if err == nil {
		st.m.SSEWritten(st.size, st.nEvents)
		if st.nEvents > 0 && !st.firstFrom.IsZero() {
			st.m.StreamFirstEvent(time.Since(st.firstFrom))
			st.firstFrom = time.Time{}
		}
	}
	clear(st.batch)
	st.batch, st.size, st.nEvents = st.batch[:0], 0, 0
	if cap(st.batch) > 256 {
		st.batch = nil
	}
	return err
}

// heartbeatFrame is an SSE comment line, which clients ignore and proxies see as traffic.
var heartbeatFrame = []byte(": heartbeat\n\n")

// closingRetry is the reconnection delay a stream's last frame asks for when the server shuts
// down (a draining replica, docs/rules.md E6): spread over [closingRetry, 2*closingRetry) so the
// clients of a replica do not all reconnect at once; they resume with Last-Event-ID, on another
// replica behind the same address.
const closingRetry = 500 * time.Millisecond

// closing writes the SSE retry hint of a stream the server ends because it shuts down.
func (st *sseWriter) closing() error {
	ms := closingRetry.Milliseconds() + rand.Int64N(closingRetry.Milliseconds())
	if err := st.put([]byte("retry: " + strconv.FormatInt(ms, 10) + "\n\n")); err != nil {
		return err
	}
	return st.flush()
}

// comment writes the heartbeat comment.
func (st *sseWriter) comment() error {
	if err := st.put(heartbeatFrame); err != nil {
		return err
	}
	return st.flush()
}

// httpOut writes a stream's batches to its handler's ResponseWriter.
type httpOut struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (o httpOut) write(deadline time.Time, frames [][]byte) error {
	if err := o.rc.SetWriteDeadline(deadline); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	for _, f := range frames {
		if _, err := o.w.Write(f); err != nil {
			return err
		}
	}
	if err := o.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// connOut writes a detached stream's batches to its connection: each batch is one HTTP/1.1 chunk
// (or, for HTTP/1.0, the bare bytes), written with one writev that refers to the frames.
type connOut struct {
	conn    net.Conn
	chunked bool
	written int          // bytes of frames written
	closing atomic.Int64 // when set (Unix ns), no write deadline is later: the server is closing
}

var crlf = []byte("\r\n")

// closeBy moves the deadline of the write in flight, and of every later one, to t at the latest.
func (o *connOut) closeBy(t time.Time) {
	o.closing.Store(t.UnixNano())
	_ = o.conn.SetWriteDeadline(t)
}

// deadline is d, or the closing deadline when that is earlier.
func (o *connOut) deadline(d time.Time) time.Time {
	if c := o.closing.Load(); c != 0 && c < d.UnixNano() {
		return time.Unix(0, c)
	}
	return d
}

func (o *connOut) write(deadline time.Time, frames [][]byte) error {
	if err := o.conn.SetWriteDeadline(o.deadline(deadline)); err != nil {
		return err
	}
	n := 0
	for _, f := range frames {
		n += len(f)
	}
	bufs := make(net.Buffers, 0, len(frames)+2)
	if o.chunked {
		bufs = append(bufs, append(strconv.AppendInt(make([]byte, 0, 18), int64(n), 16), crlf...))
	}
	bufs = append(bufs, frames...)
	if o.chunked {
		bufs = append(bufs, crlf)
	}
	_, err := bufs.WriteTo(o.conn)
	o.written += n
	return err
}

// end completes the response (the last chunk of a chunked one) within timeout, and closes the
// connection.
func (o *connOut) end(timeout time.Duration) {
	if o.chunked {
		_ = o.conn.SetWriteDeadline(o.deadline(time.Now().Add(timeout)))
		_, _ = o.conn.Write([]byte("0\r\n\r\n"))
	}
	_ = o.conn.Close()
}

// appendFrame writes the SSE frame of ev: `id: <seq>`, `event: <type>`, `data: <event JSON>`.
// The event JSON is written directly: its data comes from the log, where it was stored as
// validated compact JSON, so it needs no second pass (encoding/json would re-scan it).
func appendFrame(buf *bytes.Buffer, ev eventlog.Event) error {
	// A raw newline would split the frame: only data that is not compact JSON can hold one.
	if bytes.IndexByte(ev.Data, '\n') >= 0 || strings.ContainsAny(ev.Type, "\r\n") {
		return appendFrameSlow(buf, ev)
	}
	typ, err := json.Marshal(ev.Type)
	if err != nil {
		return err
	}
	data := ev.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	var b []byte
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, ev.Seq, 10)
	b = append(b, "\nevent: "...)
	b = append(b, ev.Type...)
	b = append(b, "\ndata: {\"type\":"...)
	b = append(b, typ...)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, ev.Seq, 10)
	b = append(b, `,"time":`...)
	b = strconv.AppendInt(b, ev.Time, 10)
	b = append(b, `,"data":`...)
	b = append(b, data...)
	if ev.SurfaceOp != nil {
		op, _ := ev.SurfaceOp.MarshalJSON()
		b = append(b, `,"surfaceOp":`...)
		b = append(b, op...)
	}
	if ev.SourceEventSeqs != nil {
		b = append(b, `,"sourceEventSeqs":[`...)
		for i, seq := range ev.SourceEventSeqs {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, seq, 10)
		}
		b = append(b, ']')
	}
	if ev.Ignorable {
		b = append(b, `,"ignorable":true`...)
	}
	b = append(b, "}\n\n"...)
	buf.Write(b)
	return nil
}

// appendFrameSlow writes a frame through encoding/json, splitting lines, for data that is not
// compact.
func appendFrameSlow(buf *bytes.Buffer, ev eventlog.Event) error {
	data, err := ev.MarshalJSON() // not json.Marshal: it would escape & < > in Data
	if err != nil {
		return err
	}
	buf.WriteString("id: ")
	buf.WriteString(strconv.FormatInt(ev.Seq, 10))
	buf.WriteString("\nevent: ")
	buf.WriteString(ev.Type)
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		buf.WriteString("\ndata: ")
		buf.Write(line)
	}
	buf.WriteString("\n\n")
	return nil
}

// encodeFrame returns the SSE frame of ev, or nil when it cannot be encoded.
func encodeFrame(ev eventlog.Event) []byte {
	var b bytes.Buffer
	if appendFrame(&b, ev) != nil {
		return nil
	}
	return b.Bytes()
}
