package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
)

// obsClient talks to a test program over HTTP with one tenant's key.
type obsClient struct {
	t   *testing.T
	m   *Main
	key string
	hdr http.Header // sent with every request, when set
}

// do sends a JSON request and decodes a JSON answer into v (when not nil), failing the test on a
// status other than want.
func (c obsClient) do(method, path string, body any, want int, v any) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.m.URL()+path, rd)
	for k, v := range c.hdr {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		c.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			c.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
}

// newObsTenant creates a tenant and returns its client and id.
func newObsTenant(t *testing.T, m *Main) (obsClient, uuid.UUID) {
	t.Helper()
	var tenant struct {
		ID     uuid.UUID
		APIKey string
	}
	obsClient{t: t, m: m, key: "admin"}.do("POST", "/v1/tenants", map[string]string{"name": "obs"}, 201, &tenant)
	return obsClient{t: t, m: m, key: tenant.APIKey}, tenant.ID
}

// session creates a session of a new preset with the given body.
func (c obsClient) session(preset map[string]any) string {
	c.t.Helper()
	var p, s struct{ ID string }
	c.do("POST", "/v1/presets", preset, 201, &p)
	c.do("POST", "/v1/sessions", map[string]string{"presetId": p.ID}, 201, &s)
	return s.ID
}

type obsEvent struct {
	Seq       int64           `json:"seq"`
	Type      string          `json:"type"`
	Data      json.RawMessage `json:"data"`
	Ignorable bool            `json:"ignorable"`
}

// events returns the session's whole log.
func (c obsClient) events(sid string) []obsEvent {
	c.t.Helper()
	var out []obsEvent
	after := int64(-1)
	for {
		var page struct {
			Events []obsEvent `json:"events"`
		}
		c.do("GET", "/v1/sessions/"+sid+"/events?after="+strconv.FormatInt(after, 10), nil, 200, &page)
		if len(page.Events) == 0 {
			return out
		}
		out = append(out, page.Events...)
		after = page.Events[len(page.Events)-1].Seq
	}
}

// turnEnds returns the data of the session's turn/end events.
func turnEnds(evs []obsEvent) []eventlog.TurnEnd {
	var out []eventlog.TurnEnd
	for _, ev := range evs {
		if ev.Type == eventlog.TypeTurnEnd {
			var d eventlog.TurnEnd
			_ = json.Unmarshal(ev.Data, &d)
			out = append(out, d)
		}
	}
	return out
}

// post posts a followup and waits (a generous safety bound, not a performance limit) until the
// session has n ended turns.
func (c obsClient) post(sid, content string, n int) []obsEvent {
	c.t.Helper()
	c.do("POST", "/v1/sessions/"+sid+"/messages", map[string]string{"content": content}, 202, nil)
	return c.waitTurns(sid, n)
}

func (c obsClient) waitTurns(sid string, n int) []obsEvent {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		evs := c.events(sid)
		if len(turnEnds(evs)) >= n {
			return evs
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("session %s: fewer than %d turns ended in 60s", sid, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// streamPost posts a followup with Accept: text/event-stream and reads the stream to its end
// (after the turn/end of the turn that served the message); it returns the event types seen.
func (c obsClient) streamPost(sid, content string) []string {
	c.t.Helper()
	b, _ := json.Marshal(map[string]string{"content": content})
	req, _ := http.NewRequest("POST", c.m.URL()+"/v1/sessions/"+sid+"/messages", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var types []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if typ, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			types = append(types, typ)
		}
	}
	if len(types) == 0 || types[len(types)-1] != eventlog.TypeTurnEnd {
		c.t.Fatalf("the message's stream ended without its turn/end: %v", types)
	}
	return types
}

// scrape is one /metrics exposition: series lines by metric name.
type scrape map[string][]series

type series struct {
	labels map[string]string
	value  float64
}

func (m *Main) scrape(t *testing.T) scrape {
	t.Helper()
	req, _ := http.NewRequest("GET", m.URL()+"/metrics", nil)
	if m.Config.MetricsToken != "" {
		req.Header.Set("Authorization", "Bearer "+m.Config.MetricsToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	out := scrape{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, labels := line, "", map[string]string{}
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if strings.HasPrefix(rest, "{") {
			end := strings.LastIndex(rest, "}")
			for _, kv := range splitLabels(rest[1:end]) {
				k, v, _ := strings.Cut(kv, "=")
				uq, err := strconv.Unquote(v)
				if err != nil {
					t.Fatalf("label %q of %q: %v", kv, line, err)
				}
				labels[k] = uq
			}
			rest = rest[end+1:]
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			t.Fatalf("value of %q: %v", line, err)
		}
		out[name] = append(out[name], series{labels: labels, value: v})
	}
	return out
}

// splitLabels splits `a="x",b="y,z"` at the commas between pairs.
func splitLabels(s string) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// sum adds the values of name's series whose labels include want (a label wanted "" must be
// absent or empty); ok reports whether any matched.
func (s scrape) sum(name string, want map[string]string) (total float64, ok bool) {
	for _, se := range s[name] {
		match := true
		for k, v := range want {
			if se.labels[k] != v {
				match = false
				break
			}
		}
		if match {
			total, ok = total+se.value, true
		}
	}
	return total, ok
}

// TestMetricsAfterScriptedRun runs scripted turns through the whole program (tools, text, a
// retried rate limit, a failing turn, an unknown tool, an approval, a streaming POST and a
// crash repair) and checks that /metrics shows every operational series with the values the
// run implies (docs/observability.md).
func TestMetricsAfterScriptedRun(t *testing.T) {
	t.Parallel()
	// The scripted model's name "m" is on the operator's list; the token guards /metrics.
	m := newTestMain(t, func(c *Config) { c.MetricsModels, c.MetricsToken = []string{"m"}, "scrape" })
	if resp, err := http.Get(m.URL() + "/metrics"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /metrics without the token: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	c, tenantID := newObsTenant(t, m)
	model := map[string]any{"provider": "scripted", "model": "m"}
	sid := c.session(map[string]any{"name": "p", "model": model})

	// Turn 1, a streaming POST: two echo calls, then the answer (2 steps, 2 model calls).
	c.streamPost(sid, "tools:2")
	// Turn 2: text (1 step). Turn 3: a rate limit, retried once (1 step, 2 attempts). Turn 4: a
	// quota failure ends the turn with its code (1 step). Turn 5: an unknown tool (2 steps).
	c.post(sid, "say:hello", 2)
	c.post(sid, "fail:RATE_LIMIT failtimes:1", 3)
	c.post(sid, "fail:QUOTA", 4)
	evs := c.post(sid, "tool:nosuch", 5)
	ends := turnEnds(evs)
	if ends[3].Reason.Kind != eventlog.EndError || ends[3].Reason.Error == nil || ends[3].Reason.Error.Code != "QUOTA" {
		t.Fatalf("turn 4 ended %+v, want error QUOTA", ends[3].Reason)
	}

	// An approval: the echo call's ask parks the turn (counted), then it is rejected and the turn
	// resumes.
	asid := c.session(map[string]any{"name": "ask", "model": model,
		"approval": map[string]any{"policy": "ask", "ask": []string{"echo"}}})
	c.do("POST", "/v1/sessions/"+asid+"/messages", map[string]string{"content": "tools:1"}, 202, nil)
	waitMetric(t, m, "dshd_turns_parked_total", 1)
	var list struct {
		Items []struct{ ID string } `json:"items"`
	}
	c.do("GET", "/v1/sessions/"+asid+"/approvals", nil, 200, &list)
	if len(list.Items) != 1 {
		t.Fatalf("approvals %+v", list)
	}
	c.do("POST", "/v1/sessions/"+asid+"/approvals/"+list.Items[0].ID, map[string]string{"outcome": "rejected"}, 200, nil)
	c.waitTurns(asid, 1)

	// A crashed replica: another owner took the lease of a third session and opened a turn, then
	// vanished. The sweeper wakes the session once the lease expires; this replica takes the lease
	// over (a wake job) and repairs the turn. The ghost's lease lasts long enough for its append
	// whatever the machine's load, and is then expired at once.
	csid := c.session(map[string]any{"name": "crash", "model": model})
	st := pgstore.NewStore(m.pool, pgstore.StoreConfig{})
	ghost := uuid.New()
	ctx := context.Background()
	if ok, _, err := st.LeaseAcquire(ctx, tenantID, uuid.MustParse(csid), ghost, 30*time.Second); err != nil || !ok {
		t.Fatalf("ghost lease: %v %v", ok, err)
	}
	if _, err := st.Journal(nil, tenantID, uuid.MustParse(csid), ghost).Append(ctx, func(eventlog.Head) ([]eventlog.NewEvent, error) {
		return []eventlog.NewEvent{eventlog.Of(eventlog.TurnStart{Turn: 1})}, nil
	}); err != nil {
		t.Fatal(err)
	}
	expireLease(t, m, csid)
	c.waitTurns(csid, 1)
	waitMetric(t, m, "dshd_crash_repairs_total", 1)

	s := m.scrape(t)
	check := func(name string, labels map[string]string, want func(float64) bool, what string) {
		t.Helper()
		v, ok := s.sum(name, labels)
		if !ok || !want(v) {
			t.Errorf("%s%v = %v (present %v), want %s", name, labels, v, ok, what)
		}
	}
	eq := func(n float64) func(float64) bool { return func(v float64) bool { return v == n } }
	pos := func(v float64) bool { return v > 0 }
	any := func(float64) bool { return true }
	chat := map[string]string{"gen_ai_operation_name": "chat", "gen_ai_provider_name": "scripted", "gen_ai_request_model": "m"}
	with := func(base map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}

	// Turns of the first session (5) plus the approval's (completed: its rejected call is a
	// result) and the crash session's, which its repair closed (it ran no turn here).
	check("dshd_turn_duration_seconds_count", map[string]string{"reason": "completed"}, eq(5), "5 completed turns")
	check("dshd_turn_duration_seconds_count", map[string]string{"reason": "error"}, eq(1), "1 error turn")
	check("dshd_turn_duration_seconds_sum", nil, pos, "> 0")
	check("dshd_turn_errors_total", map[string]string{"error_type": "QUOTA"}, eq(1), "1")
	check("dshd_turn_steps_count", nil, eq(6), "6 turns")
	check("dshd_turn_steps_sum", nil, eq(2+1+1+1+2+2), "9 steps")
	// Model calls: 2+1+2+1+2 in the first session, 2 in the approval's.
	check("gen_ai_client_operation_duration_seconds_count", with(chat, "error_type", ""), eq(8), "8 successful attempts")
	check("gen_ai_client_operation_duration_seconds_count", with(chat, "error_type", "RATE_LIMIT"), eq(1), "1")
	check("gen_ai_client_operation_duration_seconds_count", with(chat, "error_type", "QUOTA"), eq(1), "1")
	check("gen_ai_client_operation_duration_seconds_sum", chat, pos, "> 0")
	check("dshd_model_errors_total", map[string]string{"gen_ai_provider_name": "scripted", "error_type": "RATE_LIMIT"}, eq(1), "1")
	check("dshd_model_errors_total", map[string]string{"error_type": "QUOTA"}, eq(1), "1")
	check("gen_ai_client_operation_time_to_first_chunk_seconds_count", chat, eq(8), "8 streams with a chunk")
	check("gen_ai_client_token_usage_count", with(chat, "gen_ai_token_type", "input"), eq(8), "8")
	check("gen_ai_client_token_usage_sum", with(chat, "gen_ai_token_type", "input"), pos, "> 0")
	check("gen_ai_client_token_usage_sum", with(chat, "gen_ai_token_type", "output"), pos, "> 0")
	// Tools: two echo calls, an unknown tool, and the rejected echo.
	check("gen_ai_execute_tool_duration_seconds_count", map[string]string{"gen_ai_tool_name": "echo", "error_type": ""}, eq(2), "2")
	check("gen_ai_execute_tool_duration_seconds_count", map[string]string{"gen_ai_tool_name": "unknown", "error_type": "UNKNOWN_TOOL"}, eq(1), "1")
	check("gen_ai_execute_tool_duration_seconds_sum", nil, pos, "> 0")
	check("dshd_tool_errors_total", map[string]string{"gen_ai_tool_name": "unknown", "error_type": "UNKNOWN_TOOL"}, eq(1), "1")
	check("dshd_tool_errors_total", map[string]string{"gen_ai_tool_name": "echo"}, eq(1), "1 (the rejected call)")
	// Queue, leases and repairs: the repair's wake job waited, its lease was taken over.
	check("dshd_queue_job_wait_seconds_count", nil, func(v float64) bool { return v >= 1 }, ">= 1")
	check("dshd_queue_jobs", map[string]string{"state": "available"}, any, "present")
	check("dshd_queue_jobs", map[string]string{"state": "running"}, any, "present")
	check("dshd_lease_takeovers_total", nil, eq(1), "1")
	check("dshd_crash_repairs_total", nil, eq(1), "1")
	check("dshd_approvals_pending", nil, eq(0), "0 (the ask parked its turn)")
	check("dshd_turns_parked_total", map[string]string{"reason": "approval"}, eq(1), "1 (the ask)")
	check("dshd_turns_resumed_total", nil, eq(1), "1 (the answer)")
	// SSE: the streaming POST wrote frames; its first event was measured once.
	check("dshd_sse_streams_open", nil, eq(0), "0")
	check("dshd_sse_bytes_total", nil, pos, "> 0")
	check("dshd_sse_events_total", nil, func(v float64) bool { return v >= 10 }, ">= 10 event frames")
	check("dshd_stream_first_event_seconds_count", nil, eq(1), "1 streaming POST")
	check("dshd_stream_first_event_seconds_sum", nil, pos, "> 0")
	// The pool and the HTTP series.
	check("dshd_pg_pool_max_conns", nil, pos, "> 0")
	check("dshd_pg_pool_total_conns", nil, pos, "> 0")
	check("dshd_pg_pool_acquires_total", nil, pos, "> 0")
	check("dshd_http_requests_total", map[string]string{"route": "/v1/sessions/{id}/messages", "method": "POST"}, pos, "> 0")
	// Bounded labels: no label carries a session or tenant id.
	for name, ss := range s {
		for _, se := range ss {
			for k, v := range se.labels {
				if strings.Contains(v, sid) || strings.Contains(v, tenantID.String()) {
					t.Errorf("%s label %s=%q carries an id", name, k, v)
				}
			}
		}
	}
}

// expireLease makes the run lease of session sid, whoever holds it, expired now.
func expireLease(t *testing.T, m *Main, sid string) {
	t.Helper()
	if _, err := m.pool.Exec(context.Background(), `UPDATE session_counters
		SET run_lease_until = now() - interval '1 second' WHERE session_id = $1`, uuid.MustParse(sid)); err != nil {
		t.Fatal(err)
	}
}

// waitMetric waits (a generous safety bound) until the sum of name's series is want.
func waitMetric(t *testing.T, m *Main, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if v, _ := m.scrape(t).sum(name, nil); v == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not reach %v in 60s", name, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestParseConfigTracing: tracing is off by default, DSHD_OTLP_ENDPOINT wins over the standard
// OTLP variables, OTEL_SDK_DISABLED turns it off, and an endpoint that is no http(s) URL is
// refused; DSHD_METRICS_MODELS is a list.
func TestParseConfigTracing(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{nil, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "http://c:4318/v1/traces"},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://c/t", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, "https://c/t"},
		{map[string]string{"DSHD_OTLP_ENDPOINT": "http://d:4318/", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, "http://d:4318/v1/traces"},
		{map[string]string{"DSHD_OTLP_ENDPOINT": "http://d:4318", "OTEL_SDK_DISABLED": "true"}, ""},
	} {
		cfg, err := ParseConfig(func(k string) string { return c.env[k] })
		if err != nil || cfg.TracesURL != c.want {
			t.Errorf("%v: TracesURL %q (%v), want %q", c.env, cfg.TracesURL, err, c.want)
		}
	}
	for _, bad := range []string{"collector:4318", "ftp://c", "http://"} {
		if _, err := ParseConfig(func(k string) string { return map[string]string{"DSHD_OTLP_ENDPOINT": bad}[k] }); err == nil {
			t.Errorf("DSHD_OTLP_ENDPOINT=%s accepted", bad)
		}
	}
	cfg, err := ParseConfig(func(k string) string { return map[string]string{"DSHD_METRICS_MODELS": "a, b"}[k] })
	if err != nil || strings.Join(cfg.MetricsModels, "|") != "a|b" || cfg.MetricsToken != "" {
		t.Errorf("DSHD_METRICS_MODELS: %v %q %v", cfg.MetricsModels, cfg.MetricsToken, err)
	}
	cfg, err = ParseConfig(func(k string) string { return map[string]string{"DSHD_METRICS_TOKEN": "tok"}[k] })
	if err != nil || cfg.MetricsToken != "tok" {
		t.Errorf("DSHD_METRICS_TOKEN: %q %v", cfg.MetricsToken, err)
	}
}
