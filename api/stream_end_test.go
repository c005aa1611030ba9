package api_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
)

// endsWithin reads s until it ends cleanly within d and returns its events; it fails the test if
// the stream is still open then.
func (s *rawStream) endsWithin(t testing.TB, d time.Duration) []eventlog.Event {
	t.Helper()
	got := make(chan []eventlog.Event, 1)
	go func() { got <- s.untilEnd(t) }()
	select {
	case evs := <-got:
		if err := <-s.done; err != io.EOF {
			t.Fatalf("the stream ended with %v, want a clean end", err)
		}
		return evs
	case <-time.After(d):
		s.resp.Body.Close()
		t.Fatalf("the stream is still open after %s", d)
		return nil
	}
}

// TestDiscardedMessageStreamEnds: a message whose turn cannot take a step (the
// preset's toolOrder names an unknown tool, so the prompt does not assemble) is claimed and
// discarded by a turn that ends with turn/end {kind: error}; the message's stream ends with that
// turn instead of sending heartbeats forever.
func TestDiscardedMessageStreamEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionOfPreset(t, e.keyA, `{"name":"p","model":{"provider":"scripted","model":"default"},"tools":{"toolOrder":["no_such_tool","<unlisted-tools>"]}}`)
	evs := postStream(t, e.replica, sid, e.keyA, `{"content":"hello"}`).endsWithin(t, 20*time.Second)
	last := evs[len(evs)-1]
	if last.Type != "turn/end" || !strings.Contains(string(last.Data), `"error"`) {
		t.Fatalf("the stream ended with %s %s, want turn/end of kind error (%v)", last.Type, last.Data, types(evs))
	}
	for _, ev := range evs {
		if ev.Type == "user/message" {
			t.Fatalf("the discarded message was entered: %v", types(evs))
		}
	}
	// The next message waits behind nothing: it is discarded by a turn of its own, and its stream
	// does not end at the first message's turn.
	evs = postStream(t, e.replica, sid, e.keyA, `{"content":"again"}`).endsWithin(t, 20*time.Second)
	if first := evs[0]; first.Type != "agent/inbox/spliced" || !strings.Contains(string(first.Data), "again") {
		t.Fatalf("the second stream starts with %s %s", first.Type, first.Data)
	}
	if last := evs[len(evs)-1]; last.Type != "turn/end" || !strings.Contains(string(last.Data), `"error"`) {
		t.Fatalf("the second stream ended with %s %s", last.Type, last.Data)
	}
}

// TestInjectStreamEnds: an inject never wakes a turn, so its stream holds the
// message's splice and ends right after it.
func TestInjectStreamEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionOfPreset(t, e.keyA, minimalPreset)
	evs := postStream(t, e.replica, sid, e.keyA, `{"content":"note this","mode":"inject"}`).endsWithin(t, 10*time.Second)
	if len(evs) != 1 || evs[0].Type != "agent/inbox/spliced" || !strings.Contains(string(evs[0].Data), "note this") {
		t.Fatalf("inject stream %v", types(evs))
	}
}

// TestDeletedSessionEndsStreams: deleting a session ends its streams on every
// replica at once, not at the next heartbeat (15 s here).
func TestDeletedSessionEndsStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	other := e.newReplica()
	sid := e.sessionCreate(t, e.keyA)
	e.appendEvents(sid, turnStart(1))
	here, there := openStream(t, streamURL(e.replica, sid), e.keyA), openStream(t, streamURL(other, sid), e.keyA)
	here.next(t)
	there.next(t)
	// An append the replicas hear of: their hubs then vouch that they have read the whole log.
	e.appendEvents(sid, stepStart(1, 1))
	here.next(t)
	there.next(t)
	e.do(t, "DELETE", "/v1/sessions/"+sid.String(), e.keyA, nil).want(t, 204)
	start := time.Now()
	here.endsWithin(t, 3*time.Second)
	there.endsWithin(t, 3*time.Second)
	t.Logf("both streams ended %s after the delete", time.Since(start))
}
