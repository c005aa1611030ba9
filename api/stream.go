package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
)

// stream serves the session's log as server-sent events: every event with seq > q.after, in
// order, then live. Frames are `id: <seq>`, `event: <type>`, `data: <event JSON>`.
//
// The stream reads the database, never a process's memory of another replica: it backfills in
// pages, then follows the session's shared tail on this replica (tail.go), which reads each new
// row once after a hub wake-up (or its heartbeat, which doubles as a poll). The tail is acquired
// before the first read and starts from the session's last seq at that moment, so no commit can
// fall between the backfill and the tail. A client that reads slowly only delays its own handler; one that stops
// reading for StreamWriteTimeout is disconnected and resumes with Last-Event-ID. The stream ends
// cleanly when the client goes away, the session is deleted, or the server closes (Close).
//
// until, when not nil, ends the stream right after the first event for which it returns true
// (a message's stream ends with the turn that served it).
func (s *Server) stream(w http.ResponseWriter, r *http.Request, id uuid.UUID, q eventQuery, until func(eventlog.Event) bool) {
	ctx := r.Context()
	tenant := tenantID(r)
	sess, err := s.cfg.Log.SessionGet(ctx, tenant, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	t := s.tails.acquire(tenant, id, sess.LastSeq)
	defer s.tails.release(t)

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	info(r).stream = true
	s.metrics.streams.Inc()
	defer s.metrics.streams.Dec()

	st := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: s.cfg.StreamWriteTimeout}
	// The end of the response (flushed after the handler returns) gets a deadline of its own; the
	// next request on the connection sets its own.
	defer func() { _ = st.rc.SetWriteDeadline(time.Now().Add(s.cfg.StreamWriteTimeout)) }()
	if err := st.flush(); err != nil {
		return
	}
	heartbeat := time.NewTicker(s.cfg.Heartbeat)
	defer heartbeat.Stop()
	cursor := q.after
	for {
		evs, frames, ok, changed, err := t.since(cursor)
		if err != nil {
			s.streamEnded(r, err)
			return
		}
		if !ok {
			// Behind the shared buffer: read the database up to its end, which is at least the
			// tail's last seq read before (so a type filter that matched nothing skips it).
			lastBefore := t.lastSeq()
			var done bool
			if cursor, done, err = s.backfill(ctx, st, tenant, id, cursor, q.types, until); err != nil {
				s.streamEnded(r, err)
				return
			}
			if done {
				return
			}
			cursor = max(cursor, lastBefore)
			continue
		}
		if len(evs) > 0 {
			done, err := st.send(evs, frames, q.types, until)
			if err != nil {
				s.streamEnded(r, err)
				return
			}
			if done {
				return
			}
			cursor = evs[len(evs)-1].Seq
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-s.done:
			return
		case <-changed:
		case <-heartbeat.C:
			if err := st.comment("heartbeat"); err != nil {
				s.streamEnded(r, err)
				return
			}
		}
	}
}

// backfill sends every event after cursor that is committed now, a page at a time, and returns
// the new cursor; done reports that until ended the stream.
func (s *Server) backfill(ctx context.Context, st *sseWriter, tenant, id uuid.UUID, cursor int64, types []string, until func(eventlog.Event) bool) (_ int64, done bool, _ error) {
	for {
		evs, err := s.cfg.Log.EventList(ctx, tenant, id, pgstore.ListQuery{After: cursor, Limit: s.cfg.StreamPage, Types: types})
		if err != nil {
			return cursor, false, err
		}
		if len(evs) == 0 {
			return cursor, false, nil
		}
		full := len(evs) == s.cfg.StreamPage
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

// streamEnded logs why a stream ended, unless the client simply went away.
func (s *Server) streamEnded(r *http.Request, err error) {
	if errors.Is(err, context.Canceled) || r.Context().Err() != nil {
		return
	}
	level := slog.LevelWarn
	if errors.Is(err, eventlog.ErrNotFound) {
		level = slog.LevelInfo // the session was deleted while streaming
	}
	logger(r).Log(r.Context(), level, "stream ended", slog.String("error", err.Error()))
}

// sseWriter writes server-sent event frames to one client.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     bytes.Buffer
}

// maxWriteBytes is how much a stream buffers before it writes.
const maxWriteBytes = 1 << 20

// send writes the events that pass the type filter, up to and including the first for which
// until is true (done then reports it). frames, when not nil, are the events' encoded frames
// (shared by the streams of a tail, so each event is encoded once per replica).
func (st *sseWriter) send(evs []eventlog.Event, frames [][]byte, types []string, until func(eventlog.Event) bool) (done bool, err error) {
	st.buf.Reset()
	for i, ev := range evs {
		if len(types) == 0 || slices.Contains(types, ev.Type) {
			if frames != nil && frames[i] != nil {
				st.buf.Write(frames[i])
			} else if err := appendFrame(&st.buf, ev); err != nil {
				return false, err
			}
			// Large events go out in several writes rather than one huge buffer.
			if st.buf.Len() >= maxWriteBytes {
				if err := st.write(); err != nil {
					return false, err
				}
				st.buf.Reset()
			}
		}
		if until != nil && until(ev) {
			done = true
			break
		}
	}
	if st.buf.Len() == 0 {
		return done, nil
	}
	return done, st.write()
}

// events writes one frame per event and flushes them together.
func (st *sseWriter) events(evs []eventlog.Event) error {
	_, err := st.send(evs, nil, nil, nil)
	return err
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
	data, err := json.Marshal(ev)
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

// comment writes an SSE comment line, which clients ignore and proxies see as traffic.
func (st *sseWriter) comment(text string) error {
	st.buf.Reset()
	st.buf.WriteString(": " + text + "\n\n")
	return st.write()
}

func (st *sseWriter) write() error {
	if err := st.rc.SetWriteDeadline(time.Now().Add(st.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if _, err := st.w.Write(st.buf.Bytes()); err != nil {
		return err
	}
	return st.flush()
}

func (st *sseWriter) flush() error {
	err := st.rc.Flush()
	if errors.Is(err, http.ErrNotSupported) {
		return nil
	}
	return err
}
