package openai_test

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/llm/openai"
)

// TestErrorBodyIsNotQuoted: a failed response's body, which may be anything the endpoint sends
// (an internal proxy's page, a stack trace), never reaches the tenant-visible message.
func TestErrorBodyIsNotQuoted(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("<html>upstream 10.1.2.3:5432 SECRET-TOKEN stack trace</html>"))
	}))
	t.Cleanup(srv.Close)
	_, err := call(t, newClient(srv.URL, &recordSleep{}, nil), userRequest("text"))
	var e *llm.Error
	if !errors.As(err, &e) || e.Code != llm.CodeServer || e.Status != 502 || e.Message != "HTTP 502" {
		t.Fatalf("err %#v", err)
	}
	if strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "10.1.2.3") {
		t.Fatalf("the body leaked: %v", err)
	}
}

// TestTransportErrorHidesAddress: a connection failure names its class, not the address; the
// network error is kept in Err for the logs.
func TestTransportErrorHidesAddress(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	c := newClient("http://"+addr+"/v1", &recordSleep{}, func(c *openai.Config) { c.MaxAttempts = 2 })
	_, err = call(t, c, userRequest("text"))
	var e *llm.Error
	if !errors.As(err, &e) || e.Code != llm.CodeTransport {
		t.Fatalf("err %#v, want TRANSPORT", err)
	}
	if e.Message != "send request: could not reach the model endpoint (connection refused)" {
		t.Fatalf("message %q", e.Message)
	}
	if strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("the address leaked: %v", err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(e.Err.Error(), addr) {
		t.Fatalf("the cause was lost: %v", e.Err)
	}
}

// TestMalformedChunkDataIsNotQuoted: the data of a malformed chunk stays out of the message.
func TestMalformedChunkDataIsNotQuoted(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: SECRET-internal-data\n\n"))
	}))
	t.Cleanup(srv.Close)
	_, err := call(t, newClient(srv.URL, &recordSleep{}, nil), userRequest("text"))
	var e *llm.Error
	if !errors.As(err, &e) || e.Code != llm.CodeTransport || strings.Contains(e.Message, "SECRET") {
		t.Fatalf("err %v", err)
	}
	if !strings.Contains(e.Err.Error(), "SECRET") {
		t.Fatalf("the data is not kept for the logs: %v", e.Err)
	}
}
