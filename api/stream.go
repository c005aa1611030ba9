package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
)

// stream serves the session's log as server-sent events: every event with seq > q.after, in
// order, then live. Frames are `id: <seq>`, `event: <type>`, `data: <event JSON>`.
//
// The stream reads the database, never a process's memory: it backfills in pages, then waits for
// a hub wake-up (or the heartbeat, which doubles as a poll) and re-reads the rows after its
// cursor. Because the subscription is taken before the first read, no commit can fall between
// the read and the wait. A client that reads slowly only delays its own handler; one that stops
// reading for StreamWriteTimeout is disconnected and resumes with Last-Event-ID. The stream ends
// cleanly when the client goes away, the session is deleted, or the server closes (Close).
//
// until, when not nil, ends the stream right after the first event for which it returns true
// (a message's stream ends with the turn that served it).
func (s *Server) stream(w http.ResponseWriter, r *http.Request, id uuid.UUID, q eventQuery, until func(eventlog.Event) bool) {
	ctx := r.Context()
	tenant := tenantID(r)
	if _, err := s.cfg.Log.SessionGet(ctx, tenant, id); err != nil {
		writeError(w, r, err)
		return
	}
	wake, cancel := s.cfg.Hub.Subscribe(id)
	defer cancel()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	info(r).stream = true
	s.metrics.streams.Inc()
	defer s.metrics.streams.Dec()

	st := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: s.cfg.StreamWriteTimeout}
	// Clear the write deadline when the stream ends: the connection may serve further requests.
	defer func() { _ = st.rc.SetWriteDeadline(time.Time{}) }()
	if err := st.flush(); err != nil {
		return
	}
	heartbeat := time.NewTicker(s.cfg.Heartbeat)
	defer heartbeat.Stop()
	cursor := q.after
	for {
		var (
			err  error
			done bool
		)
		if cursor, done, err = s.backfill(ctx, st, tenant, id, cursor, q.types, until); err != nil {
			s.streamEnded(r, err)
			return
		}
		if done {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-s.done:
			return
		case <-wake:
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
		evs, err := s.cfg.Log.EventList(ctx, tenant, id, eventlog.ListQuery{After: cursor, Limit: s.cfg.StreamPage, Types: types})
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

// events writes one frame per event and flushes them together.
func (st *sseWriter) events(evs []eventlog.Event) error {
	st.buf.Reset()
	for _, ev := range evs {
		data, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		st.buf.WriteString("id: ")
		st.buf.WriteString(strconv.FormatInt(ev.Seq, 10))
		st.buf.WriteString("\nevent: ")
		st.buf.WriteString(ev.Type)
		// Marshalled JSON holds no raw newline; splitting keeps the frame valid regardless.
		for line := range bytes.SplitSeq(data, []byte("\n")) {
			st.buf.WriteString("\ndata: ")
			st.buf.Write(line)
		}
		st.buf.WriteString("\n\n")
	}
	return st.write()
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
