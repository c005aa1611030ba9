package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newTestMain runs the program on a free port over a fresh database.
func newTestMain(t *testing.T) *Main {
	t.Helper()
	m := NewMain()
	m.Config.DatabaseURL = pgtest.URL(t)
	m.Config.Addr = "127.0.0.1:0"
	m.Config.AdminToken = "admin"
	m.Config.DemoTools = true
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
		len(c.ModelHosts) != 1 || c.ModelHosts[0] != "api.deepseek.com" ||
		c.WriteTimeout != 30*time.Second || c.PageBytes != 4<<20 {
		t.Fatalf("defaults %+v", c)
	}
	env := map[string]string{"DATABASE_URL": "postgres://x/y", "DSHD_ADDR": ":9", "DSHD_ADMIN_TOKEN": "a",
		"DSHD_MODEL_HOSTS": "a.example, b.example:8000 ,", "DSHD_DEMO_TOOLS": "1", "DEEPSEEK_API_KEY": "k",
		"DSHD_SSE_HEARTBEAT": "2s", "DSHD_MAX_BODY_BYTES": "10", "DSHD_SHUTDOWN_TIMEOUT": "1m", "DSHD_LOG_LEVEL": "debug",
		"DSHD_WRITE_TIMEOUT": "5s", "DSHD_PAGE_BYTES": "1000"}
	c, err = ParseConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.DatabaseURL != "postgres://x/y" || c.Addr != ":9" || c.AdminToken != "a" || !c.DemoTools ||
		c.DeepSeekAPIKey != "k" || c.Heartbeat != 2*time.Second || c.MaxBodyBytes != 10 ||
		c.ShutdownTimeout != time.Minute || c.LogLevel.String() != "DEBUG" ||
		strings.Join(c.ModelHosts, "|") != "a.example|b.example:8000" || c.WriteTimeout != 5*time.Second || c.PageBytes != 1000 {
		t.Fatalf("parsed %+v", c)
	}
	for k, v := range map[string]string{"DSHD_DEMO_TOOLS": "maybe", "DSHD_SSE_HEARTBEAT": "soon",
		"DSHD_MAX_BODY_BYTES": "-1", "DSHD_SHUTDOWN_TIMEOUT": "0s", "DSHD_LOG_LEVEL": "loud",
		"DSHD_WRITE_TIMEOUT": "never", "DSHD_PAGE_BYTES": "0"} {
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
