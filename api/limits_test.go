package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/api"
)

// trickler is a raw TCP client that sends a request's head at once and its body a byte at a time.
type trickler struct {
	conn net.Conn
	stop chan struct{}
	once sync.Once
}

// trickle sends head (which ends with the blank line), then body one byte every gap until the
// body is sent, the server closes the connection or close is called.
func trickle(t testing.TB, r *replica, head, body string, gap time.Duration) *trickler {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	tr := &trickler{conn: conn, stop: make(chan struct{})}
	t.Cleanup(tr.close)
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := range len(body) {
			select {
			case <-tr.stop:
				return
			case <-time.After(gap):
			}
			if _, err := conn.Write([]byte{body[i]}); err != nil {
				return
			}
		}
	}()
	return tr
}

func (tr *trickler) close() { tr.once.Do(func() { close(tr.stop); tr.conn.Close() }) }

// response reads the response head and body (a problem document, so small) within d.
func (tr *trickler) response(t testing.TB, d time.Duration) (*http.Response, api.Problem, time.Duration) {
	t.Helper()
	start := time.Now()
	_ = tr.conn.SetReadDeadline(start.Add(d))
	resp, err := http.ReadResponse(bufio.NewReader(tr.conn), nil)
	if err != nil {
		t.Fatalf("no response within %s: %v", d, err)
	}
	defer resp.Body.Close()
	var p api.Problem
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &p)
	return resp, p, time.Since(start)
}

func postHead(path, key string, length int) string {
	auth := ""
	if key != "" {
		auth = "Authorization: Bearer " + key + "\r\n"
	}
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, auth, length)
}

// TestTrickledBodyTimesOut: a body trickled at a byte per 50 ms answers 408
// request_timeout once Config.BodyReadTimeout has passed, with a Content-Length or chunked, and
// the connection is closed.
func TestTrickledBodyTimesOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.BodyReadTimeout = 500 * time.Millisecond })
	body := minimalPreset + strings.Repeat(" ", 500)
	for name, head := range map[string]string{
		"content-length": postHead("/v1/presets", e.keyA, len(body)),
		"chunked": "POST /v1/presets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + e.keyA +
			"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			payload := body
			if name == "chunked" {
				payload = fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
			}
			tr := trickle(t, e.replica, head, payload, 50*time.Millisecond)
			resp, p, took := tr.response(t, 10*time.Second)
			if resp.StatusCode != http.StatusRequestTimeout || p.Code != "request_timeout" || p.Detail == "" {
				t.Fatalf("status %d problem %+v, want 408 request_timeout", resp.StatusCode, p)
			}
			if took > 5*time.Second {
				t.Errorf("answered after %s", took)
			}
			_ = tr.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			// The server closes the connection; when trickled bytes were still unread in its
			// receive buffer the kernel answers the close with a reset, which closes it just as well.
			if _, err := tr.conn.Read(make([]byte, 1)); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("the connection stays open after the timeout: %v", err)
			}
		})
	}
}

// TestUnauthenticatedTrickleAnsweredAtOnce: 200 clients without a key trickling
// bodies all get their 401 at once, and their connections are closed rather than held while the
// server waits for bodies it will never read.
func TestUnauthenticatedTrickleAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const clients = 200
	body := strings.Repeat(" ", 10_000)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		path := []string{"/v1/presets", "/v1/sessions", "/v1/tenants"}[i%3]
		tr := trickle(t, e.replica, postHead(path, "", len(body)), body, 100*time.Millisecond)
		wg.Go(func() {
			start := time.Now()
			_ = tr.conn.SetReadDeadline(start.Add(10 * time.Second))
			br := bufio.NewReader(tr.conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				errs <- fmt.Errorf("%s: no answer: %v", path, err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				errs <- fmt.Errorf("%s: status %d", path, resp.StatusCode)
			}
			if _, err := br.ReadByte(); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
				errs <- fmt.Errorf("%s: the connection was not closed: %v", path, err)
			}
			if d := time.Since(start); d > 5*time.Second {
				errs <- fmt.Errorf("%s: answered and closed after %s", path, d)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestUnauthenticatedRequestsAreBounded: beyond Config.MaxUnauthenticated requests
// in flight that have not authenticated, requests answer 503 server_busy at once; requests that
// authenticated do not count.
func TestUnauthenticatedRequestsAreBounded(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{}, 10)
	e := newEnv(t, func(c *api.Config) {
		c.MaxUnauthenticated = 2
		c.Ready = func(ctx context.Context) error {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}
	})
	// A stream authenticates, then stays: it holds no slot.
	sid := e.sessionCreate(t, e.keyA)
	openStream(t, streamURL(e.replica, sid), e.keyA)
	done := make(chan int, 2)
	for range 2 {
		go func() { done <- e.do(t, "GET", "/readyz", "", nil).status }()
		<-entered
	}
	p := e.do(t, "GET", "/v1/presets", e.keyA, nil).wantProblem(t, http.StatusServiceUnavailable, "server_busy")
	if !strings.Contains(p.Detail, "unauthenticated") {
		t.Errorf("detail %q", p.Detail)
	}
	r := e.do(t, "POST", "/v1/presets", "", minimalPreset)
	r.wantProblem(t, http.StatusServiceUnavailable, "server_busy")
	if r.header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	e.do(t, "GET", "/healthz", "", nil).want(t, http.StatusOK) // liveness is never refused
	close(release)
	for range 2 {
		if s := <-done; s != http.StatusOK {
			t.Fatalf("readyz %d", s)
		}
	}
	e.do(t, "GET", "/v1/presets", e.keyA, nil).want(t, http.StatusOK)
}
