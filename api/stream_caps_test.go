package api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/pkg/eventlog"
)

// streamStatus opens a stream and returns its status, closing it unless it is 200 (then the
// stream stays open until the test ends).
func streamStatus(t testing.TB, url, key string) (int, api.Problem) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := harnessClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK {
		t.Cleanup(func() { resp.Body.Close() })
		return resp.StatusCode, api.Problem{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := response{status: resp.StatusCode, header: resp.Header, body: b}
	return resp.StatusCode, r.wantProblem(t, resp.StatusCode, "too_many_streams")
}

// TestStreamCaps: a session holds at most Config.MaxStreamsPerSession streams and a
// tenant at most Config.MaxStreamsPerTenant; beyond them a stream answers 429 too_many_streams,
// a message posted for a stream is refused before it is posted, and a stream that ends frees its
// place.
func TestStreamCaps(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.MaxStreamsPerSession = 2; c.MaxStreamsPerTenant = 3 })
	s1, s2, s3 := e.sessionCreate(t, e.keyA), e.sessionCreate(t, e.keyA), e.sessionCreate(t, e.keyA)
	first := openStream(t, streamURL(e.replica, s1), e.keyA)
	openStream(t, streamURL(e.replica, s1), e.keyA)
	if status, p := streamStatus(t, streamURL(e.replica, s1), e.keyA); status != 429 || !strings.Contains(p.Detail, "session") {
		t.Fatalf("a third stream of a session: %d %+v", status, p)
	}
	openStream(t, streamURL(e.replica, s2), e.keyA)
	if status, p := streamStatus(t, streamURL(e.replica, s3), e.keyA); status != 429 || !strings.Contains(p.Detail, "tenant") {
		t.Fatalf("a fourth stream of a tenant: %d %+v", status, p)
	}
	// A message posted with Accept: text/event-stream beyond the cap is not posted.
	r := e.do(t, "POST", "/v1/sessions/"+s3.String()+"/messages", e.keyA, `{"content":"x"}`, "Accept", "text/event-stream")
	r.wantProblem(t, 429, "too_many_streams")
	if r.header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	if evs := e.allEvents(t, s3.String()); len(evs) != 0 {
		t.Fatalf("a refused message stream posted its message: %v", types(evs))
	}
	// Another tenant is not limited by this one.
	sb := e.sessionCreate(t, e.keyB)
	openStream(t, streamURL(e.replica, sb), e.keyB)
	// A stream that ends gives its place back.
	first.resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if status, _ := streamStatus(t, streamURL(e.replica, s3), e.keyA); status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the place of a closed stream was not given back")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// smallBufferServer serves e's API on another listener whose connections have small send
// buffers, as a congested network leaves them: a client that reads slowly holds the server's
// writes back at once.
func smallBufferServer(t testing.TB, e *env) string {
	t.Helper()
	ts := httptest.NewUnstartedServer(e.api)
	ts.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		_ = c.(*net.TCPConn).SetWriteBuffer(16 << 10)
		return ctx
	}
	ts.Start()
	t.Cleanup(func() { e.api.Close(); ts.Close() })
	return ts.URL
}

// rawStreamConn starts a stream of sid on a raw connection with a small receive buffer and reads
// its response head; the body is left to the caller.
func rawStreamConn(t testing.TB, base string, sid uuid.UUID, key string) (net.Conn, io.Reader) {
	t.Helper()
	conn := stalledClient(t, strings.TrimPrefix(base, "http://"))
	fmt.Fprintf(conn, "GET /v1/sessions/%s/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n\r\n", sid, key)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 1024), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %v %v", resp, err)
	}
	return conn, resp.Body
}

// TestSlowReaderIsDropped: a subscriber that reads much slower than the session's
// log grows is dropped once it is Config.StreamMaxLag behind (it resumes with Last-Event-ID),
// instead of being fed for as long as its writes trickle through; a fast subscriber gets
// everything.
func TestSlowReaderIsDropped(t *testing.T) {
	t.Parallel()
	// The lag allowed is 24 of the chunks below: a fast subscriber delayed by a loaded machine
	// stays well inside it, and the slow one leaves it within a second.
	e := newEnv(t, func(c *api.Config) { c.StreamMaxLag = 384 << 10; c.StreamWriteTimeout = time.Minute })
	base := smallBufferServer(t, e)
	sid := e.sessionCreate(t, e.keyA)
	e.appendEvents(sid, turnStart(1), stepStart(1, 1))
	fast := openStream(t, streamURL(e.replica, sid), e.keyA)
	conn, body := rawStreamConn(t, base, sid, e.keyA)
	for range 2 {
		fast.next(t)
	}
	br := bufio.NewReaderSize(body, 1024)
	for line := ""; !strings.HasPrefix(line, "id: 1"); {
		var err error
		if line, err = br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	const n = 60 // 60 chunks of 16 KiB: about 1 MB, 2.5 times the lag allowed
	big := strings.Repeat("z", 16<<10)
	for i := range n {
		e.appendEvents(sid, chunk(1, 1, strconv.Itoa(i)+big))
	}
	// The slow reader takes 1 KiB every 20 ms, 50 KB/s: all of it would take 20 s.
	start := time.Now()
	var got int
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 1024)
	for {
		k, err := br.Read(buf)
		got += k
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d bytes: %v", got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Dropped by its lag, not by a clock: it got far less than the turn before its stream ended.
	if got >= n*(16<<10) {
		t.Fatalf("the slow reader got %d bytes in %s before its stream ended; want it dropped early", got, time.Since(start))
	}
	for i := range n {
		if f := fast.next(t); f.id != strconv.Itoa(i+2) {
			t.Fatalf("the fast reader got frame %s, want %d", f.id, i+2)
		}
	}
}

// TestStalledReadersAreCheap: 50 subscribers that never read, following a session
// through a 4 MB turn, hold little of it each: the frames they have not sent are the tail's,
// shared, not copies per subscriber (they were about 1 MiB each).
func TestStalledReadersAreCheap(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 4 MB turn")
	}
	e := newEnv(t, func(c *api.Config) { c.StreamWriteTimeout = time.Minute; c.MaxStreamsPerSession = 100 })
	base := smallBufferServer(t, e)
	sid := e.sessionCreate(t, e.keyA)
	e.appendEvents(sid, turnStart(1), stepStart(1, 1))
	big := strings.Repeat("w", 16<<10)
	var batch []eventlog.NewEvent
	for i := range 256 {
		batch = append(batch, chunk(1, 1, strconv.Itoa(i)+big))
		if len(batch) == 32 {
			e.appendEvents(sid, batch...)
			batch = nil
		}
	}
	// One reader that keeps up holds the tail (every event's frame, shared) in memory.
	fast := openStream(t, streamURL(e.replica, sid), e.keyA)
	for range 258 {
		fast.next(t)
	}
	heap0, _ := memNow()
	const stalled = 50
	for range stalled {
		rawStreamConn(t, base, sid, e.keyA)
	}
	time.Sleep(500 * time.Millisecond) // their writes fill the socket buffers and block
	heap1, _ := memNow()
	per := float64(heap1-heap0) / stalled
	t.Logf("%d stalled subscribers of a 4 MB turn: %.1f KiB each", stalled, per/1024)
	// About 130 KiB each, the session's shared tail included (it was 1.1 MB before the byte
	// bounds on backfill pages and stream writes).
	if !raceEnabled && per > 160<<10 {
		t.Errorf("a stalled subscriber holds %.1f KiB, want at most 160 KiB", per/1024)
	}
	runtime.KeepAlive(fast)
}

// TestCloseCutsStalledStreams: closing the server ends a caught-up stream whose
// client then stopped reading within about a second, not after StreamWriteTimeout (a minute here).
func TestCloseCutsStalledStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.StreamWriteTimeout = time.Minute })
	base := smallBufferServer(t, e)
	sid := e.sessionCreate(t, e.keyA)
	e.appendEvents(sid, turnStart(1))
	_, body := rawStreamConn(t, base, sid, e.keyA)
	br := bufio.NewReader(body)
	for line := ""; !strings.HasPrefix(line, "id: 0"); {
		var err error
		if line, err = br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // caught up: the stream has its connection to itself
	big := strings.Repeat("q", 16<<10)
	for i := range 40 { // far more than the socket buffers hold: the stream's write blocks
		e.appendEvents(sid, chunk(1, 1, strconv.Itoa(i)+big))
	}
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	e.api.Close()
	took := time.Since(start)
	t.Logf("Close took %s", took)
	// Without the cut Close would wait out the stalled write, a minute: half of it tells the two
	// apart on any machine.
	if took > 30*time.Second {
		t.Fatalf("Close took %s: it waited for the stalled stream's write timeout", took)
	}
}
