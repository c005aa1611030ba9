package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newTestMain runs the program on a free port over a fresh database.
func newTestMain(t *testing.T, cfg ...func(*Config)) *Main {
	t.Helper()
	m := NewMain()
	m.Config.DatabaseURL = pgtest.URL(t)
	m.Config.Addr = "127.0.0.1:0"
	m.Config.AdminToken = "admin"
	m.Config.DemoTools = true
	for _, f := range cfg {
		f(&m.Config)
	}
	if err := m.Run(context.Background()); err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if c.DatabaseURL != DefaultDatabaseURL || c.Addr != ":8080" || c.AdminToken != "" || c.DemoTools ||
		c.Heartbeat != 15*time.Second || c.MaxBodyBytes != 1<<20 || c.ShutdownTimeout != 10*time.Second ||
		len(c.ModelHosts) != 1 || c.ModelHosts[0] != "api.deepseek.com" || c.DBRetry != 30*time.Second ||
		c.WriteTimeout != 30*time.Second || c.PageBytes != 4<<20 || c.ReadHeaderTimeout != 5*time.Second ||
		c.BodyReadTimeout != 10*time.Second || c.MaxUnauthenticated != 256 || c.StreamWriteTimeout != 10*time.Second ||
		c.StreamMaxLag != 4<<20 || c.MaxStreamsPerSession != 32 || c.MaxStreamsPerTenant != 256 {
		t.Fatalf("defaults %+v", c)
	}
	env := map[string]string{"DATABASE_URL": "postgres://x/y", "DSHD_ADDR": ":9", "DSHD_ADMIN_TOKEN": "a",
		"DSHD_MODEL_HOSTS": "a.example, b.example:8000 ,", "DSHD_DEMO_TOOLS": "1", "DEEPSEEK_API_KEY": "k",
		"DSHD_SSE_HEARTBEAT": "2s", "DSHD_MAX_BODY_BYTES": "10", "DSHD_SHUTDOWN_TIMEOUT": "1m", "DSHD_LOG_LEVEL": "debug",
		"DSHD_WRITE_TIMEOUT": "5s", "DSHD_PAGE_BYTES": "1000", "DSHD_READ_HEADER_TIMEOUT": "1s",
		"DSHD_BODY_READ_TIMEOUT": "2s", "DSHD_MAX_UNAUTHENTICATED": "3", "DSHD_SSE_WRITE_TIMEOUT": "3s",
		"DSHD_SSE_MAX_LAG": "4096", "DSHD_SSE_MAX_PER_SESSION": "4", "DSHD_SSE_MAX_PER_TENANT": "5", "DSHD_DB_RETRY": "5s"}
	c, err = ParseConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.DatabaseURL != "postgres://x/y" || c.Addr != ":9" || c.AdminToken != "a" || !c.DemoTools ||
		c.DeepSeekAPIKey != "k" || c.Heartbeat != 2*time.Second || c.MaxBodyBytes != 10 ||
		c.ShutdownTimeout != time.Minute || c.LogLevel.String() != "DEBUG" || c.DBRetry != 5*time.Second ||
		strings.Join(c.ModelHosts, "|") != "a.example|b.example:8000" || c.WriteTimeout != 5*time.Second || c.PageBytes != 1000 ||
		c.ReadHeaderTimeout != time.Second || c.BodyReadTimeout != 2*time.Second || c.MaxUnauthenticated != 3 ||
		c.StreamWriteTimeout != 3*time.Second || c.StreamMaxLag != 4096 || c.MaxStreamsPerSession != 4 || c.MaxStreamsPerTenant != 5 {
		t.Fatalf("parsed %+v", c)
	}
	for k, v := range map[string]string{"DSHD_DEMO_TOOLS": "maybe", "DSHD_SSE_HEARTBEAT": "soon",
		"DSHD_MAX_BODY_BYTES": "-1", "DSHD_SHUTDOWN_TIMEOUT": "0s", "DSHD_LOG_LEVEL": "loud",
		"DSHD_WRITE_TIMEOUT": "never", "DSHD_PAGE_BYTES": "0", "DSHD_READ_HEADER_TIMEOUT": "0",
		"DSHD_BODY_READ_TIMEOUT": "x", "DSHD_MAX_UNAUTHENTICATED": "-1", "DSHD_SSE_WRITE_TIMEOUT": "-1s",
		"DSHD_SSE_MAX_LAG": "lots", "DSHD_SSE_MAX_PER_SESSION": "0", "DSHD_SSE_MAX_PER_TENANT": "1.5", "DSHD_DB_RETRY": "never"} {
		if _, err := ParseConfig(func(name string) string { return map[string]string{k: v}[name] }); err == nil {
			t.Errorf("%s=%s accepted", k, v)
		}
	}
}

// TestMainServesAndShutsDownGracefully runs the whole program on :0: it migrates, serves, and
// on Close ends an open SSE stream with a complete response.
func TestMainServesAndShutsDownGracefully(t *testing.T) {
	t.Parallel()
	m := newTestMain(t)
	post := func(path, key, body string, v any) {
		t.Helper()
		req, _ := http.NewRequest("POST", m.URL()+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.Get(m.URL() + "/readyz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz: %v %v", resp, err)
	}
	resp.Body.Close()
	var tenant struct{ APIKey string }
	post("/v1/tenants", "admin", `{"name":"t"}`, &tenant)
	var preset, session struct{ ID string }
	post("/v1/presets", tenant.APIKey, `{"name":"p","model":{"provider":"scripted","model":"m"}}`, &preset)
	post("/v1/sessions", tenant.APIKey, `{"presetId":"`+preset.ID+`"}`, &session)
	post("/v1/sessions", tenant.APIKey, `{"fork":{"sessionId":"`+session.ID+`"}}`, &session)

	req, _ := http.NewRequest("GET", m.URL()+"/v1/sessions/"+session.ID+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+tenant.APIKey)
	req.Header.Set("Accept", "text/event-stream")
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	br := bufio.NewReader(stream.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "id: 0\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	if _, err := io.ReadAll(br); err != nil {
		t.Fatalf("the stream did not end cleanly: %v", err)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return")
	}
	if _, err := http.Get(m.URL() + "/healthz"); err == nil {
		t.Fatal("the server still answers after Close")
	}
}

// TestSlowClientsAreCut runs the program with short read bounds over real TCP: a
// request head trickled a byte at a time is cut at DSHD_READ_HEADER_TIMEOUT, and a trickled body
// answers 408 at DSHD_BODY_READ_TIMEOUT, without an API key in either case.
func TestSlowClientsAreCut(t *testing.T) {
	t.Parallel()
	m := newTestMain(t, func(c *Config) {
		c.ReadHeaderTimeout = 300 * time.Millisecond
		c.BodyReadTimeout = 300 * time.Millisecond
	})
	slow := func(head string, body string) (string, time.Duration) {
		conn, err := net.Dial("tcp", m.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		go func() {
			_, _ = io.WriteString(conn, head)
			for i := range len(body) {
				time.Sleep(50 * time.Millisecond)
				if _, err := conn.Write([]byte{body[i]}); err != nil {
					return
				}
			}
		}()
		start := time.Now()
		_ = conn.SetReadDeadline(start.Add(10 * time.Second))
		out, _ := io.ReadAll(conn) // until the server closes the connection
		return string(out), time.Since(start)
	}
	// The head, a byte every 50 ms: the server gives up on it (net/http answers a bare 400 and
	// closes the connection).
	head := "POST /v1/tenants HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
	for _, c := range []struct{ head, body, want string }{
		{"", head, ""},
		{head, strings.Repeat(" ", 100), "HTTP/1.1 401"},
		{strings.Replace(head, "Host: x", "Host: x\r\nAuthorization: Bearer admin", 1), strings.Repeat(" ", 100), "HTTP/1.1 408"},
	} {
		out, took := slow(c.head, c.body)
		if !strings.HasPrefix(out, c.want) || took > 2*time.Second {
			t.Errorf("%q: after %s the server answered %q, want %q", c.head, took, out, c.want)
		}
	}
}
