package api_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/pkg/eventlog"
)

// frame is one parsed SSE frame: a comment, or an event with id, type and data.
type frame struct {
	comment   string
	id, event string
	data      string
	retry     string // a retry hint's milliseconds (a stream the server ends as it shuts down)
}

// rawStream is an SSE response read frame by frame on a goroutine.
type rawStream struct {
	resp   *http.Response
	frames chan frame
	done   chan error // receives the read error (io.EOF for a clean end), then closes
}

func openStream(t testing.TB, url, key string, headers ...string) *rawStream {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := harnessClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream status %d: %s", resp.StatusCode, body)
	}
	s := &rawStream{resp: resp, frames: make(chan frame, 4096), done: make(chan error, 1)}
	go s.read()
	return s
}

func (s *rawStream) read() {
	defer close(s.frames)
	br := bufio.NewReader(s.resp.Body)
	var f frame
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			s.done <- err
			return
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			s.frames <- f
			f = frame{}
		case strings.HasPrefix(line, ": "):
			f.comment = line[2:]
		case strings.HasPrefix(line, "id: "):
			f.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			f.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			f.data += line[6:]
		case strings.HasPrefix(line, "retry: "):
			f.retry = line[7:]
		default:
			s.done <- fmt.Errorf("unexpected SSE line %q", line)
			return
		}
	}
}

// next returns the next event frame, skipping comments; it fails the test after 10 s.
func (s *rawStream) next(t testing.TB) frame {
	t.Helper()
	for {
		select {
		case f, ok := <-s.frames:
			if !ok {
				t.Fatalf("stream ended: %v", <-s.done)
			}
			if f.comment == "" && f.retry == "" {
				return f
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no SSE frame within 10s")
		}
	}
}

func TestStreamBackfillThenLive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionCreate(t, e.keyA)
	e.appendEvents(sid, turnStart(1), stepStart(1, 1))
	s := openStream(t, e.url+"/v1/sessions/"+sid.String()+"/events", e.keyA)
	for k, want := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"} {
		if got := s.resp.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	first := s.next(t)
	var ev struct {
		Type string
		Seq  int64
		Time int64
		Data struct{ Turn int }
	}
	if err := json.Unmarshal([]byte(first.data), &ev); err != nil {
		t.Fatal(err)
	}
	if first.id != "0" || first.event != "turn/start" || ev.Type != "turn/start" || ev.Seq != 0 || ev.Data.Turn != 1 || ev.Time == 0 {
		t.Fatalf("first frame %+v, event %+v", first, ev)
	}
	if f := s.next(t); f.id != "1" || f.event != "step/start" {
		t.Fatalf("second frame %+v", f)
	}
	e.appendEvents(sid, chunk(1, 1, "live"), stepEnd(1, 1))
	for _, want := range []string{"2 assistant/chunk", "3 step/end"} {
		if f := s.next(t); f.id+" "+f.event != want {
			t.Fatalf("live frame %+v, want %s", f, want)
		}
	}
}

func TestStreamHeartbeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.Heartbeat = 20 * time.Millisecond })
	sid := e.sessionCreate(t, e.keyA)
	s := openStream(t, e.url+"/v1/sessions/"+sid.String()+"/events", e.keyA)
	select {
	case f := <-s.frames:
		if f.comment != "heartbeat" || f.id != "" {
			t.Fatalf("first frame on an empty log %+v, want the heartbeat comment", f)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no heartbeat")
	}
}

// TestStreamCursor: Last-Event-ID wins over ?after=, which a browser's first connect uses.
func TestStreamCursor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionCreate(t, e.keyA)
	e.appendEvents(sid, turnStart(1), stepStart(1, 1), chunk(1, 1, "a"), chunk(1, 1, "b"), stepEnd(1, 1), turnEnd(1))
	url := e.url + "/v1/sessions/" + sid.String() + "/events"
	if f := openStream(t, url+"?after=2", e.keyA).next(t); f.id != "3" {
		t.Fatalf("?after=2 starts at %s", f.id)
	}
	if f := openStream(t, url+"?after=1", e.keyA, "Last-Event-ID", "4").next(t); f.id != "5" {
		t.Fatalf("Last-Event-ID 4 with ?after=1 starts at %s", f.id)
	}
	if f := openStream(t, url+"?types=turn/end", e.keyA).next(t); f.id != "5" || f.event != "turn/end" {
		t.Fatalf("types filter starts at %+v", f)
	}
}

// TestStreamEndsCleanlyOnClose: closing the server (graceful shutdown) ends open streams with a
// complete response, not a broken connection, whose last frame tells the client when to come
// back.
func TestStreamEndsCleanlyOnClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionCreate(t, e.keyA)
	e.appendEvents(sid, turnStart(1))
	s := openStream(t, e.url+"/v1/sessions/"+sid.String()+"/events", e.keyA)
	s.next(t)
	e.api.Close()
	select {
	case err := <-s.done:
		if err != io.EOF {
			t.Fatalf("stream ended with %v, want a clean EOF", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stream still open after Close")
	}
	// Its last frame is the reconnection hint (docs/rules.md E6): 500 to 999 ms.
	var last frame
	for f := range s.frames {
		last = f
	}
	if ms, err := strconv.Atoi(last.retry); err != nil || ms < 500 || ms >= 1000 {
		t.Fatalf("the stream's last frame %+v, want a retry hint of 500 to 999 ms", last)
	}
}

// TestStreamSlowClientSlowsOnlyItself: a subscriber that stops reading does not delay another.
func TestStreamSlowClientSlowsOnlyItself(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.StreamWriteTimeout = 200 * time.Millisecond })
	sid := e.sessionCreate(t, e.keyA)
	url := e.url + "/v1/sessions/" + sid.String() + "/events"
	// The stalled subscriber never reads its body: its frames fill the socket buffers, then its
	// writes time out and its handler ends.
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+e.keyA)
	req.Header.Set("Accept", "text/event-stream")
	stalled, err := harnessClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Body.Close()
	s := openStream(t, url, e.keyA)
	big := strings.Repeat("x", 16<<10)
	const n = 400 // about 6.5 MB in all, more than loopback socket buffers hold
	e.appendEvents(sid, turnStart(1), stepStart(1, 1))
	for i := range n {
		e.appendEvents(sid, chunk(1, 1, strconv.Itoa(i)+big))
	}
	for i := range n + 2 {
		if f := s.next(t); f.id != strconv.Itoa(i) {
			t.Fatalf("frame %d has id %s", i, f.id)
		}
	}
}

// streamURL is the events URL of session sid on replica r.
func streamURL(r *replica, sid uuid.UUID) string {
	return r.url + "/v1/sessions/" + sid.String() + "/events"
}

// TestStreamSharedTailTrimmed follows a session with several streams through a shared tail that
// keeps only 4 events while events arrive in bursts: streams that fall behind the tail read the
// database, and every stream still gets every event once, in order.
func TestStreamSharedTailTrimmed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.StreamTailBuffer = 4 })
	sid := e.sessionCreate(t, e.keyA)
	e.appendEvents(sid, turnStart(1), stepStart(1, 1))
	streams := []*rawStream{}
	for range 3 {
		streams = append(streams, openStream(t, streamURL(e.replica, sid), e.keyA))
	}
	const bursts, per = 10, 7
	for b := range bursts {
		var evs []eventlog.NewEvent
		for i := range per {
			evs = append(evs, chunk(1, 1, fmt.Sprintf("%d.%d", b, i)))
		}
		e.appendEvents(sid, evs...)
	}
	total := 2 + bursts*per
	for i, s := range streams {
		for seq := range total {
			f := s.next(t)
			if f.id != strconv.Itoa(seq) {
				t.Fatalf("stream %d: frame %s, want seq %d", i, f.id, seq)
			}
		}
	}
}
