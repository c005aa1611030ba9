package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
)

// postStream posts a message with Accept: text/event-stream and returns the stream.
func postStream(t testing.TB, r *replica, sid, key, body string) *rawStream {
	t.Helper()
	req, err := http.NewRequest("POST", r.url+"/v1/sessions/"+sid+"/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	resp, err := harnessClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("message stream status %d", resp.StatusCode)
	}
	s := &rawStream{resp: resp, frames: make(chan frame, 4096), done: make(chan error, 1)}
	go s.read()
	return s
}

// untilEnd reads event frames until the stream ends cleanly and returns them.
func (s *rawStream) untilEnd(t testing.TB) []eventlog.Event {
	t.Helper()
	var out []eventlog.Event
	for f := range s.frames {
		if f.comment != "" {
			continue
		}
		var ev eventlog.Event
		if err := json.Unmarshal([]byte(f.data), &ev); err != nil {
			t.Fatalf("frame %q: %v", f.data, err)
		}
		if f.event != ev.Type || f.id != fmt.Sprint(ev.Seq) {
			t.Fatalf("frame id %s event %s for %s %d", f.id, f.event, ev.Type, ev.Seq)
		}
		out = append(out, ev)
	}
	return out
}

func types(evs []eventlog.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Type)
	}
	return out
}

func subsequence(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// sessionOfPreset creates a preset from body and a session of it.
func (e *env) sessionOfPreset(t testing.TB, key, body string) string {
	t.Helper()
	var p, s struct{ ID string }
	e.do(t, "POST", "/v1/presets", key, body).want(t, 201).json(t, &p)
	e.do(t, "POST", "/v1/sessions", key, `{"presetId":"`+p.ID+`"}`).want(t, 201).json(t, &s)
	return s.ID
}

func TestScenario26_RoundTripOverHTTP(t *testing.T) {
	t.Parallel()
	m := mockllm.New(mockllm.Config{})
	ms := httptest.NewServer(m.Handler())
	t.Cleanup(func() { m.Close(); ms.Close() })
	u, _ := url.Parse(ms.URL)
	e := newEnvHosts(t, u.Host)
	sid := e.sessionOfPreset(t, e.keyA, `{"name":"mock","model":{"provider":"openai","model":"mock","baseUrl":"`+ms.URL+`"}}`)
	evs := postStream(t, e.replica, sid, e.keyA, `{"content":"tool:echo args:{\"text\":\"hi\"}"}`).untilEnd(t)
	want := []string{"agent/inbox/spliced", "turn/start", "step/start", "user/message", "request/header",
		"assistant/chunk", "assistant/message", "tool/call", "tool/result", "step/end", "step/start",
		"assistant/message", "step/end", "turn/end"}
	if got := types(evs); !subsequence(got, want) {
		t.Fatalf("stream %v lacks %v", got, want)
	}
	if last := evs[len(evs)-1]; last.Type != "turn/end" || !strings.Contains(string(last.Data), `"completed"`) {
		t.Fatalf("stream ended with %s %s", last.Type, last.Data)
	}
	var call struct{ CallID string }
	for _, ev := range evs {
		if ev.Type == "tool/call" {
			_ = json.Unmarshal(ev.Data, &call)
		}
	}
	reqs := m.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	var second struct {
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			Content    any    `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(reqs[1], &second); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, msg := range second.Messages {
		if msg.Role == "tool" && msg.ToolCallID == call.CallID && fmt.Sprint(msg.Content) == "hi" {
			found = true
		}
	}
	if !found {
		t.Fatalf("second request lacks the tool result for %s: %s", call.CallID, reqs[1])
	}
	if err := eventlog.CheckInvariants(e.allEvents(t, sid)); err != nil {
		t.Fatal(err)
	}
}

func (e *env) allEvents(t testing.TB, sid string) []eventlog.Event {
	t.Helper()
	evs, err := e.log.EventList(t.Context(), e.tenantA, uuid.MustParse(sid), pgstore.ListQuery{After: -1, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func TestIdempotentRetryCreatesNoSecondTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionOfPreset(t, e.keyA, minimalPreset)
	path := "/v1/sessions/" + sid + "/messages"
	var first, again struct {
		MessageID string
		Seq       int64
	}
	e.do(t, "POST", path, e.keyA, `{"content":"text"}`, "Idempotency-Key", "retry-1").want(t, 202).json(t, &first)
	e.do(t, "POST", path, e.keyA, `{"content":"text"}`, "Idempotency-Key", "retry-1").want(t, 202).json(t, &again)
	if first != again {
		t.Fatalf("retry answered %+v, first %+v", again, first)
	}
	e.do(t, "POST", path, e.keyA, `{"content":"other"}`, "Idempotency-Key", "retry-1").want(t, 409)
	// A streamed request with a new key is served by its own turn; by then the retried message
	// has run exactly once.
	evs := postStream(t, e.replica, sid, e.keyA, `{"content":"text"}`).untilEnd(t)
	if last := evs[len(evs)-1]; last.Type != "turn/end" || !strings.Contains(string(last.Data), `"completed"`) {
		t.Fatalf("the stream ended with %s %s", last.Type, last.Data)
	}
	all := e.allEvents(t, sid)
	splices, turns := 0, 0
	for _, ev := range all {
		if ev.Type == "agent/inbox/spliced" && strings.Contains(string(ev.Data), `"inserted":[{`) {
			splices++
		}
		if ev.Type == "turn/start" {
			turns++
		}
	}
	if splices != 2 || turns != 2 {
		t.Fatalf("%d messages and %d turns, want 2 and 2", splices, turns)
	}
}

func TestLOOP7_CancelOverHTTPInterruptsStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionOfPreset(t, e.keyA, minimalPreset)
	// A long answer streamed a word per 100 ms: the cancel lands mid-stream.
	s := postStream(t, e.replica, sid, e.keyA, `{"content":"say:`+strings.Repeat("word%20", 600)+`end chunkdelay:100"}`)
	for {
		f := s.next(t)
		if f.event == "assistant/chunk" && strings.Contains(f.data, "text-delta") {
			break
		}
	}
	var res struct{ Cancelled bool }
	e.do(t, "POST", "/v1/sessions/"+sid+"/cancel", e.keyA, `{}`).want(t, 200).json(t, &res)
	if !res.Cancelled {
		t.Fatal("cancel of a running turn was not recorded")
	}
	evs := s.untilEnd(t)
	last := evs[len(evs)-1]
	if last.Type != "turn/end" || !strings.Contains(string(last.Data), `"aborted"`) {
		for _, ev := range e.allEvents(t, sid) {
			if ev.Type != "assistant/chunk" {
				t.Logf("%d %s %.200s", ev.Seq, ev.Type, ev.Data)
			}
		}
		t.Fatalf("stream ended with %s %s", last.Type, last.Data)
	}
	var interrupted bool
	for _, ev := range evs {
		if ev.Type == "assistant/message" && strings.Contains(string(ev.Data), `"interrupted":true`) {
			interrupted = true
		}
	}
	if !interrupted {
		t.Fatalf("no interrupted assistant message in %v", types(evs))
	}
	// Cancel on an idle session does nothing. The worker releases the session's lease just after
	// the turn's end; wait for that.
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := e.log.SessionHead(t.Context(), e.tenantA, uuid.MustParse(sid))
		if err != nil {
			t.Fatal(err)
		}
		if h.Lease.Owner == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease was not released after the turn")
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.do(t, "POST", "/v1/sessions/"+sid+"/cancel", e.keyA, nil).want(t, 200).json(t, &res)
	if res.Cancelled {
		t.Fatal("cancel of an idle session reported a cancel")
	}
}

func TestPromptAndTools(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionOfPreset(t, e.keyA, `{"name":"p","model":{"provider":"scripted","model":"m"},
		"tools":{"deny":["sleep","wait","fail"],"toolOrder":["todo_write","<unlisted-tools>"]},
		"prompt":{"persona":"You help {{who}}.","variables":{"who":"testers"}}}`)
	var p struct {
		System string
		Tools  []struct{ Name string }
	}
	e.do(t, "GET", "/v1/sessions/"+sid+"/prompt", e.keyA, nil).want(t, 200).json(t, &p)
	if !strings.Contains(p.System, "You help testers.") {
		t.Fatalf("system %q", p.System)
	}
	var names []string
	for _, tl := range p.Tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "todo_write,echo" {
		t.Fatalf("wire tools %v", names)
	}
	bad := e.sessionOfPreset(t, e.keyA, `{"name":"bad","model":{"provider":"scripted","model":"m"},"prompt":{"persona":"{{nope}}"}}`)
	e.do(t, "GET", "/v1/sessions/"+bad+"/prompt", e.keyA, nil).want(t, 422)
	var cat struct {
		Items []struct {
			Name            string
			ConcurrencySafe bool
		}
	}
	e.do(t, "GET", "/v1/tools", e.keyA, nil).want(t, 200).json(t, &cat)
	safe := map[string]bool{}
	for _, it := range cat.Items {
		safe[it.Name] = it.ConcurrencySafe
	}
	if len(safe) != 5 || !safe["echo"] || safe["sleep"] || !safe["wait"] || safe["fail"] || safe["todo_write"] {
		t.Fatalf("catalogue %+v", cat.Items)
	}
}
