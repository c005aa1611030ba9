package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/pgtest"
)

// TestFinding10_ScriptedOffRefusesAndEndsScriptedPresets (issue 9, finding 10): with
// DSHD_SCRIPTED_MODEL=0 the server refuses scripted presets (400; they were accepted with 201),
// and a session of a scripted preset stored while it was on gets an answer: its message's
// stream ends with turn/end {kind: error, error: {code: NO_ADAPTER}} (its job retried for
// weeks, the stream hung).
func TestFinding10_ScriptedOffRefusesAndEndsScriptedPresets(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	start := func(scripted bool) *Main {
		m := NewMain()
		m.Config.DatabaseURL, m.Config.Addr, m.Config.AdminToken = dbURL, "127.0.0.1:0", "admin"
		m.Config.ScriptedModel = scripted
		if err := m.Run(context.Background()); err != nil {
			m.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	client := &http.Client{Timeout: 30 * time.Second}
	do := func(m *Main, method, path, key, body string, accept string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, m.URL()+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return resp.StatusCode, string(b)
	}
	field := func(body, name string) string {
		var v map[string]any
		_ = json.Unmarshal([]byte(body), &v)
		s, _ := v[name].(string)
		return s
	}
	id := func(body string) string { return field(body, "id") }
	const scripted = `{"name":"p","model":{"provider":"scripted","model":"m"}}`

	on := start(true)
	_, tenant := do(on, "POST", "/v1/tenants", "admin", `{"name":"t"}`, "")
	key := field(tenant, "apiKey")
	code, p := do(on, "POST", "/v1/presets", key, scripted, "")
	if code != http.StatusCreated {
		t.Fatalf("scripted on: %d %s", code, p)
	}
	_, sess := do(on, "POST", "/v1/sessions", key, `{"presetId":"`+id(p)+`"}`, "")
	if err := on.Close(); err != nil {
		t.Fatal(err)
	}

	off := start(false)
	if code, body := do(off, "POST", "/v1/presets", key, scripted, ""); code != http.StatusBadRequest ||
		!strings.Contains(body, "scripted provider is disabled") {
		t.Fatalf("scripted off: %d %s, want 400", code, body)
	}
	code, stream := do(off, "POST", "/v1/sessions/"+id(sess)+"/messages", key, `{"content":"hello"}`, "text/event-stream")
	if code != http.StatusOK || !strings.Contains(stream, "turn/end") || !strings.Contains(stream, `"code":"NO_ADAPTER"`) {
		t.Fatalf("stream %d %s", code, stream)
	}
}
