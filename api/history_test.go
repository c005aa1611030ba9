package api_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

func userEvent(id, text string) eventlog.NewEvent {
	return eventlog.NewEvent{Type: "user/message", Data: llm.NewUserMessage(id, text), SurfaceOp: eventlog.Append}
}

type historyOut struct {
	Messages   []llm.Message
	NextCursor *string
}

// TestHistoryPaginated: GET /history answers pages of at most ?limit= messages and
// Config.PageBytes of data with a nextCursor, so a long session never answers in one piece; a
// small session's history is one page of the same shape as before (no nextCursor).
func TestHistoryPaginated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.PageBytes = 8 << 10 })
	sid := e.sessionCreate(t, e.keyA)
	path := "/v1/sessions/" + sid.String() + "/history"
	e.appendEvents(sid, turnStart(1), userEvent("u0", "small"))
	if r := e.do(t, "GET", path, e.keyA, nil).want(t, 200); !strings.HasPrefix(string(r.body), `{"messages":[{"id":"u0"`) || strings.Contains(string(r.body), "nextCursor") {
		t.Fatalf("small history %s", r.body)
	}
	var evs []eventlog.NewEvent
	for i := 1; i < 30; i++ {
		evs = append(evs, userEvent(fmt.Sprintf("u%d", i), strings.Repeat("x", 3000)))
	}
	e.appendEvents(sid, evs...)
	walk := func(query string) (ids []string, pages int) {
		cursor := ""
		for {
			var h historyOut
			e.do(t, "GET", path+"?"+query+cursor, e.keyA, nil).want(t, 200).json(t, &h)
			pages++
			if len(h.Messages) == 0 || pages > 100 {
				t.Fatalf("page %d of %s: %d messages", pages, query, len(h.Messages))
			}
			for _, m := range h.Messages {
				ids = append(ids, m.ID)
			}
			if h.NextCursor == nil {
				return ids, pages
			}
			cursor = "&cursor=" + *h.NextCursor
		}
	}
	want := "u0"
	for i := 1; i < 30; i++ {
		want += fmt.Sprintf(" u%d", i)
	}
	// 8 KiB of data is two 3 KB messages a page; ?limit=1 one a page.
	for query, wantPages := range map[string]int{"": 15, "limit=1": 30, "limit=1000": 15} {
		ids, pages := walk(query)
		if strings.Join(ids, " ") != want || pages != wantPages {
			t.Errorf("?%s: %d pages %v, want %d pages of %s", query, pages, ids, wantPages, want)
		}
	}
	for _, q := range []string{"cursor=x", "cursor=aDk5LjE", "limit=0", "limit=1001"} {
		e.do(t, "GET", path+"?"+q, e.keyA, nil).wantProblem(t, 400, "invalid_request")
	}
	e.do(t, "GET", path, e.keyB, nil).wantProblem(t, 404, "not_found")
}

// TestResponsesHaveAWriteDeadline: a client that asks for a large response and never
// reads it holds its handler for Config.WriteTimeout, not forever.
func TestResponsesHaveAWriteDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.WriteTimeout = 300 * time.Millisecond; c.PageBytes = 16 << 20 })
	sid := e.sessionCreate(t, e.keyA)
	big := strings.Repeat("y", 100<<10)
	for i := range 40 { // 4 MB of history, far more than the socket buffers below hold
		e.appendEvents(sid, userEvent(fmt.Sprintf("m%d", i), big))
	}
	// The same server behind a listener with small socket buffers, as a stalled client over a real
	// network would leave it.
	ts := httptest.NewUnstartedServer(e.api)
	ts.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		_ = c.(*net.TCPConn).SetWriteBuffer(16 << 10)
		return ctx
	}
	ts.Start()
	t.Cleanup(ts.Close)
	conn := stalledClient(t, strings.TrimPrefix(ts.URL, "http://"))
	fmt.Fprintf(conn, "GET /v1/sessions/%s/history HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", sid, e.keyA)
	counted := `dshd_http_requests_total{method="GET",route="/v1/sessions/{id}/history",status="200"} 1`
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(string(e.do(t, "GET", "/metrics", "", nil).body), counted) {
		if time.Now().After(deadline) {
			t.Fatal("the history handler is still writing to a client that does not read, 10 s after its write deadline")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The connection was closed under the client: reading ends before the 4 MB response.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, _ := io.Copy(io.Discard, conn)
	if n >= 4<<20 {
		t.Fatalf("the client read %d bytes: the whole response", n)
	}
}

// stalledClient dials addr with a small receive buffer and leaves reading to the caller.
func stalledClient(t testing.TB, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
