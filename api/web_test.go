package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

// contractExtras are checked by TestOpenAPIDescribesResponses before its deletions, on a session
// sid with an ended turn 1 and an open turn 2, and a session runSid of a scripted preset.
var contractExtras = []func(t *testing.T, e *env, c *contract, sid, runSid string){webContract}

func webContract(t *testing.T, e *env, c *contract, sid, runSid string) {
	base := "/v1/sessions/" + sid
	// The stream token opens a stream of runSid: the contract keeps a stream of sid open, and
	// allows one a session.
	tokBase := "/v1/sessions/" + runSid
	var tok struct{ Token, StreamURL string }
	c.check("POST", "/v1/sessions/{id}/stream-tokens", e.do(t, "POST", tokBase+"/stream-tokens", e.keyA, nil).want(t, 201)).json(t, &tok)
	c.check("POST", "/v1/sessions/{id}/stream-tokens", e.do(t, "POST", tokBase+"/stream-tokens", e.keyB, nil).want(t, 404))
	c.check("POST", "/v1/sessions/{id}/stream-tokens", e.do(t, "POST", tokBase+"/stream-tokens", "", nil).want(t, 401))
	resp := get(t, e.url+tok.StreamURL, "Accept", "text/event-stream")
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Logf("DBG %d %v %s", resp.StatusCode, resp.Header, b)
	}
	resp.Body.Close()
	c.check("GET", "/v1/sessions/{id}/events", response{status: resp.StatusCode, header: resp.Header}.want(t, 200))
	c.check("GET", "/v1/sessions/{id}/events", e.do(t, "GET", tokBase+"/events?token="+tok.Token, "", nil).want(t, 401))

	c.check("GET", "/v1/sessions/{id}/turns", e.do(t, "GET", base+"/turns", e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/sessions/{id}/turns", e.do(t, "GET", base+"/turns?limit=1", e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/sessions/{id}/turns", e.do(t, "GET", base+"/turns?cursor=x", e.keyA, nil).want(t, 400))
	c.check("GET", "/v1/sessions/{id}/turns", e.do(t, "GET", base+"/turns", e.keyB, nil).want(t, 404))
	c.check("GET", "/v1/sessions/{id}/turns/{n}", e.do(t, "GET", base+"/turns/1", e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/sessions/{id}/turns/{n}", e.do(t, "GET", base+"/turns/2", e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/sessions/{id}/turns/{n}", e.do(t, "GET", base+"/turns/3", e.keyA, nil).want(t, 404))
	c.check("GET", "/v1/sessions/{id}/turns/{n}", e.do(t, "GET", "/v1/sessions/"+runSid+"/turns/1", e.keyB, nil).want(t, 404))
	c.check("GET", "/v1/sessions", e.do(t, "GET", "/v1/sessions", e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/sessions/{id}", e.do(t, "GET", "/v1/sessions/"+runSid, e.keyA, nil).want(t, 200))
}

// get sends a GET without an API key.
func get(t testing.TB, url string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := harnessClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func finished(t testing.TB, resp *http.Response) response {
	t.Helper()
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: body}
}

func (r *replica) streamToken(t testing.TB, key string, sid uuid.UUID) string {
	t.Helper()
	var tok struct {
		Token     string
		ExpiresAt time.Time
		StreamURL string
	}
	r.do(t, "POST", "/v1/sessions/"+sid.String()+"/stream-tokens", key, nil).want(t, 201).json(t, &tok)
	if tok.Token == "" || time.Until(tok.ExpiresAt) <= 0 || !strings.Contains(tok.StreamURL, "token=") {
		t.Fatalf("stream token %+v", tok)
	}
	return tok.Token
}

// tokenStream opens the session's event stream with a stream token and headers.
func tokenStream(t testing.TB, r *replica, sid uuid.UUID, token string, headers ...string) *rawStream {
	t.Helper()
	resp := get(t, r.url+"/v1/sessions/"+sid.String()+"/events?token="+token,
		append([]string{"Accept", "text/event-stream"}, headers...)...)
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("token stream status %d: %s", resp.StatusCode, b)
	}
	s := &rawStream{resp: resp, frames: make(chan frame, 4096), done: make(chan error, 1)}
	go s.read()
	return s
}

const appOrigin = "http://app.example:3000"

func TestCORSPreflightBeforeAuthAndAllowList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.CORSOrigins = []string{appOrigin, "https://other.example"} })
	sid := e.sessionCreate(t, e.keyA)
	preflight := func(origin, method, headers string) response {
		req, _ := http.NewRequest("OPTIONS", e.url+"/v1/sessions/"+sid.String()+"/events", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", method)
		req.Header.Set("Access-Control-Request-Headers", headers)
		resp, err := harnessClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return finished(t, resp)
	}
	r := preflight(appOrigin, "GET", "last-event-id")
	r.want(t, 204)
	h := r.header
	for _, name := range []string{"traceparent", "tracestate", "Idempotency-Key"} {
		if !strings.Contains(preflight(appOrigin, "POST", strings.ToLower(name)).want(t, 204).header.Get("Access-Control-Allow-Headers"), name) {
			t.Errorf("a preflight does not allow %s", name)
		}
	}
	if h.Get("Access-Control-Allow-Origin") != appOrigin || !strings.Contains(h.Get("Access-Control-Allow-Headers"), "Last-Event-ID") ||
		!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization") || h.Get("Access-Control-Allow-Methods") != "GET, POST, PUT, PATCH, DELETE" ||
		h.Get("Access-Control-Allow-Credentials") != "" || !strings.Contains(strings.Join(h.Values("Vary"), ","), "Origin") {
		t.Fatalf("preflight headers %v", h)
	}
	r = preflight("http://evil.example", "GET", "last-event-id")
	r.wantProblem(t, 403, api.CodeOriginNotAllowed)
	if r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("refused preflight allows: %v", r.header)
	}
	// A real request: allowed origins see the answer, others are served without the header.
	for origin, allowed := range map[string]bool{appOrigin: true, "http://evil.example": false, "": false} {
		r := e.do(t, "GET", "/v1/sessions", e.keyA, nil, "Origin", origin).want(t, 200)
		if got := r.header.Get("Access-Control-Allow-Origin"); (allowed && got != origin) || (!allowed && got != "") {
			t.Fatalf("origin %q: Access-Control-Allow-Origin %q", origin, got)
		}
		if allowed {
			exposed := map[string]bool{}
			for _, h := range strings.Split(r.header.Get("Access-Control-Expose-Headers"), ",") {
				exposed[http.CanonicalHeaderKey(strings.TrimSpace(h))] = true
			}
			for _, h := range []string{"X-Request-Id", "Www-Authenticate", "Location", "Retry-After", "Ratelimit-Limit",
				"Ratelimit-Remaining", "Ratelimit-Reset", "Ratelimit-Policy", "Idempotent-Replayed"} {
				if !exposed[h] {
					t.Errorf("%s is not exposed: %v", h, r.header.Get("Access-Control-Expose-Headers"))
				}
			}
		}
	}
	// Unauthenticated requests of an allowed origin get the header too, so the page reads the 401.
	e.do(t, "GET", "/v1/sessions", "", nil, "Origin", appOrigin).wantProblem(t, 401, api.CodeUnauthorized)
	if e.do(t, "GET", "/v1/sessions", "", nil, "Origin", appOrigin).header.Get("Access-Control-Allow-Origin") != appOrigin {
		t.Fatal("a 401 lacks the CORS header")
	}

	// Without a list every preflight is refused.
	e2 := newEnv(t)
	req, _ := http.NewRequest("OPTIONS", e2.url+"/v1/sessions", nil)
	req.Header.Set("Origin", appOrigin)
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := harnessClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	finished(t, resp).wantProblem(t, 403, api.CodeOriginNotAllowed)
}

func TestParseOrigins(t *testing.T) {
	t.Parallel()
	got, err := api.ParseOrigins([]string{" https://App.Example ", "http://localhost:5173/", ""})
	if err != nil || len(got) != 2 || got[0] != "https://app.example" || got[1] != "http://localhost:5173" {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"*", "app.example", "ftp://x", "https://x/path", "https://u@x", "https://x?q=1"} {
		if _, err := api.ParseOrigins([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestStreamTokenFollowsASessionFromAnotherOrigin: a page of a listed origin follows a session
// with a stream token, and resumes with Last-Event-ID; the token opens nothing else.
func TestStreamTokenFollowsASessionFromAnotherOrigin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.CORSOrigins = []string{appOrigin} })
	sid := e.sessionCreate(t, e.keyA)
	other := e.sessionCreate(t, e.keyA)
	e.appendEvents(sid, turnStart(1), stepStart(1, 1), chunk(1, 1, "hello"))
	token := e.streamToken(t, e.keyA, sid)

	s := tokenStream(t, e.replica, sid, token, "Origin", appOrigin)
	if s.resp.Header.Get("Access-Control-Allow-Origin") != appOrigin || s.resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream headers %v", s.resp.Header)
	}
	for i := range 3 {
		if f := s.next(t); f.id != itoa(i) {
			t.Fatalf("frame %d has id %s", i, f.id)
		}
	}
	e.appendEvents(sid, stepEnd(1, 1))
	if f := s.next(t); f.id != "3" || f.event != "step/end" {
		t.Fatalf("live frame %+v", f)
	}
	// A reconnect resumes after Last-Event-ID with the same token.
	s2 := tokenStream(t, e.replica, sid, token, "Origin", appOrigin, "Last-Event-ID", "2")
	if f := s2.next(t); f.id != "3" {
		t.Fatalf("resumed at %s", f.id)
	}

	// The stream's own operation takes the token too, whatever Accept says.
	own := get(t, e.url+"/v1/sessions/"+sid.String()+"/events/stream?token="+token, "Last-Event-ID", "2", "Origin", appOrigin)
	if own.StatusCode != http.StatusOK || own.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET .../events/stream with a token: %d %v", own.StatusCode, own.Header)
	}
	own.Body.Close()

	refused := func(url string, method string, detail string, headers ...string) {
		t.Helper()
		req, _ := http.NewRequest(method, e.url+url, nil)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := harnessClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		p := finished(t, resp).wantProblem(t, 401, api.CodeUnauthorized)
		if !strings.Contains(p.Detail, detail) {
			t.Fatalf("%s %s: detail %q lacks %q", method, url, p.Detail, detail)
		}
	}
	sse := []string{"Accept", "text/event-stream"}
	q := "?token=" + token
	refused("/v1/sessions/"+other.String()+"/events"+q, "GET", "another session", sse...)
	refused("/v1/sessions/"+other.String()+"/events/stream"+q, "GET", "another session")
	refused("/v1/sessions/"+sid.String()+"/messages/stream"+q, "POST", "only opens")
	refused("/v1/sessions/"+sid.String()+"/events"+q, "GET", "only opens", "Accept", "application/json")
	refused("/v1/sessions/"+sid.String()+q, "GET", "only opens", sse...)
	refused("/v1/sessions/"+sid.String()+"/history"+q, "GET", "only opens", sse...)
	refused("/v1/sessions/"+sid.String()+"/messages"+q, "POST", "only opens", sse...)
	refused("/v1/sessions/"+sid.String()+"/stream-tokens"+q, "POST", "only opens")
	refused("/v1/sessions/"+sid.String()+"/events?token=x"+token, "GET", "invalid stream token", sse...)
	// A token with the payload of another session and the mac of this one.
	otherToken := e.streamToken(t, e.keyA, other)
	forged := strings.Join([]string{"st1", strings.Split(otherToken, ".")[1], strings.Split(token, ".")[2]}, ".")
	refused("/v1/sessions/"+other.String()+"/events?token="+forged, "GET", "invalid stream token", sse...)
	// Another tenant's key cannot mint for the session.
	e.do(t, "POST", "/v1/sessions/"+sid.String()+"/stream-tokens", e.keyB, nil).wantProblem(t, 404, api.CodeNotFound)

	// A replica with another secret refuses the token; one sharing the secret accepts it.
	secret := []byte(strings.Repeat("s", 32))
	a := e.newReplica(func(c *api.Config) { c.StreamTokenSecret = secret })
	b := e.newReplica(func(c *api.Config) { c.StreamTokenSecret = secret })
	shared := a.streamToken(t, e.keyA, sid)
	tokenStream(t, b, sid, shared).next(t)
	resp := get(t, e.url+"/v1/sessions/"+sid.String()+"/events?token="+shared, sse...)
	finished(t, resp).wantProblem(t, 401, api.CodeUnauthorized)
}

func itoa(i int) string { return strconv.Itoa(i) }

func jsonNumber(i int) string { return strconv.Itoa(i) }

func TestStreamTokenExpires(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.StreamTokenTTL = 200 * time.Millisecond })
	sid := e.sessionCreate(t, e.keyA)
	token := e.streamToken(t, e.keyA, sid)
	s := tokenStream(t, e.replica, sid, token)
	time.Sleep(300 * time.Millisecond)
	// The open stream goes on; a new one with the expired token is refused.
	e.appendEvents(sid, turnStart(1))
	if f := s.next(t); f.event != "turn/start" {
		t.Fatalf("frame %+v", f)
	}
	resp := get(t, e.url+"/v1/sessions/"+sid.String()+"/events?token="+token, "Accept", "text/event-stream")
	p := finished(t, resp).wantProblem(t, 401, api.CodeUnauthorized)
	if !strings.Contains(p.Detail, "expired") {
		t.Fatalf("detail %q", p.Detail)
	}
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestStreamTokenNeverLogged: neither an accepted nor a refused token reaches the request log.
func TestStreamTokenNeverLogged(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	e := newEnv(t, func(c *api.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	sid := e.sessionCreate(t, e.keyA)
	token := e.streamToken(t, e.keyA, sid)
	s := tokenStream(t, e.replica, sid, token)
	s.resp.Body.Close()
	finished(t, get(t, e.url+"/v1/sessions/"+sid.String()+"/history?token="+token)).want(t, 401)
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(logs.String(), `"route":"/v1/sessions/{id}/events"`) < 1 || !strings.Contains(logs.String(), `"status":401`) {
		if time.Now().After(deadline) {
			t.Fatalf("no request logs:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	payload := strings.Split(token, ".")[1]
	if out := logs.String(); strings.Contains(out, payload) || strings.Contains(out, "token=") {
		t.Fatalf("the token is in the log:\n%s", out)
	}
}

// turnView is the API's turn resource.
type turnView struct {
	Turn             int
	Status           string
	EndReason        json.RawMessage
	FirstSeq         int64
	LastSeq          int64
	StartedAt        time.Time
	EndedAt          *time.Time
	DurationMs       int64
	Steps            int
	MessageIDs       []string
	PendingApprovals int
	Usage            usageView
}

type usageView struct {
	InputTokens, OutputTokens, CacheReadTokens, CacheMissTokens, ReasoningTokens int64
	ModelCalls, ToolCalls, ToolErrors, ModelErrors                               int
}

type sessionView struct {
	ID       uuid.UUID
	Status   string
	Turn     *int
	LastTurn *int
	LastSeq  int64
	Usage    *usageView
}

func (e *env) turnOf(t testing.TB, sid string, n int) turnView {
	t.Helper()
	var out turnView
	e.do(t, "GET", "/v1/sessions/"+sid+"/turns/"+itoa(n), e.keyA, nil).want(t, 200).json(t, &out)
	return out
}

func (e *env) sessionOf(t testing.TB, sid string) sessionView {
	t.Helper()
	var out sessionView
	e.do(t, "GET", "/v1/sessions/"+sid, e.keyA, nil).want(t, 200).json(t, &out)
	return out
}

// listed returns the session as GET /v1/sessions shows it.
func (e *env) listedOf(t testing.TB, sid string) sessionView {
	t.Helper()
	var page struct{ Items []sessionView }
	e.do(t, "GET", "/v1/sessions?limit=500", e.keyA, nil).want(t, 200).json(t, &page)
	for _, s := range page.Items {
		if s.ID.String() == sid {
			return s
		}
	}
	t.Fatalf("session %s not listed", sid)
	return sessionView{}
}

// waitFor polls cond every 20 ms for up to 30 s.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ended waits until turn n of sid has ended and returns it.
func (e *env) endedTurn(t testing.TB, sid string, n int) turnView {
	t.Helper()
	var tr turnView
	waitUntil(t, "turn "+itoa(n)+" to end", func() bool {
		r := e.do(t, "GET", "/v1/sessions/"+sid+"/turns/"+itoa(n), e.keyA, nil)
		if r.status != 200 {
			return false
		}
		r.json(t, &tr)
		return tr.EndedAt != nil
	})
	return tr
}

type accepted struct {
	MessageID string
	Seq       int64
	Turn      *int
	StreamURL string
}

func (e *env) postText(t testing.TB, sid, content string) accepted {
	t.Helper()
	var a accepted
	e.do(t, "POST", "/v1/sessions/"+sid+"/messages", e.keyA, map[string]string{"content": content}).want(t, 202).json(t, &a)
	if a.StreamURL != "/v1/sessions/"+sid+"/events?after="+jsonNumber(int(a.Seq-1)) {
		t.Fatalf("stream URL %q", a.StreamURL)
	}
	return a
}

// fromLog derives turn n from the whole log the simple way: every event between its turn/start
// and turn/end.
func fromLog(t testing.TB, evs []eventlog.Event, n int) turnView {
	t.Helper()
	var out turnView
	in := false
	for _, ev := range evs {
		var d struct {
			Turn    int
			Reason  json.RawMessage
			Usage   *llm.Usage
			Error   json.RawMessage
			ID      string
			Source  struct{ Kind string }
			Message struct {
				Content []struct{ IsError bool }
			}
		}
		_ = json.Unmarshal(ev.Data, &d)
		switch {
		case ev.Type == "turn/start" && d.Turn == n:
			in, out.Turn, out.FirstSeq = true, n, ev.Seq
			out.MessageIDs = []string{}
			continue
		case !in:
			continue
		}
		switch ev.Type {
		case "turn/end":
			out.LastSeq, out.EndReason = ev.Seq, d.Reason
			var r eventlog.TurnReason
			_ = json.Unmarshal(d.Reason, &r)
			if r.Error != nil && !slices.Contains([]string{"MAX_STEPS", "PROMPT_ASSEMBLY", "UNKNOWN", "NO_ADAPTER"}, r.Error.Code) {
				out.Usage.ModelErrors++ // the attempt that failed for good
			}
			return out
		case "step/start":
			out.Steps++
			out.Usage.ModelCalls++
		case "llm/retry":
			out.Usage.ModelCalls++
			out.Usage.ModelErrors++
		case "assistant/message":
			if d.Usage != nil {
				out.Usage.InputTokens += int64(d.Usage.InputTokens)
				out.Usage.OutputTokens += int64(d.Usage.OutputTokens)
				out.Usage.CacheReadTokens += int64(d.Usage.CacheReadTokens)
				out.Usage.CacheMissTokens += int64(d.Usage.CacheMissTokens)
				out.Usage.ReasoningTokens += int64(d.Usage.ReasoningTokens)
			}
		case "tool/call":
			out.Usage.ToolCalls++
		case "tool/result":
			if len(d.Error) > 0 || (len(d.Message.Content) > 0 && d.Message.Content[0].IsError) {
				out.Usage.ToolErrors++
			}
		case "user/message":
			if d.Source.Kind == "user" {
				out.MessageIDs = append(out.MessageIDs, d.ID)
			}
		}
	}
	t.Fatalf("turn %d did not end in the log", n)
	return out
}

func (e *env) wholeLog(t testing.TB, sid uuid.UUID) []eventlog.Event {
	t.Helper()
	var all []eventlog.Event
	after := int64(-1)
	for {
		var p struct {
			Events    []eventlog.Event
			NextAfter int64
		}
		e.do(t, "GET", "/v1/sessions/"+sid.String()+"/events?limit=1000&after="+jsonNumber(int(after)), e.keyA, nil).want(t, 200).json(t, &p)
		all = append(all, p.Events...)
		if len(p.Events) == 0 {
			return all
		}
		after = p.NextAfter
	}
}

// matchLog checks the API's turn against the log's.
func matchLog(t testing.TB, got turnView, evs []eventlog.Event, status string) {
	t.Helper()
	want := fromLog(t, evs, got.Turn)
	if got.Status != status || got.FirstSeq != want.FirstSeq || got.LastSeq != want.LastSeq || got.Steps != want.Steps ||
		got.Usage != want.Usage || !bytes.Equal(got.EndReason, want.EndReason) ||
		strings.Join(got.MessageIDs, ",") != strings.Join(want.MessageIDs, ",") {
		t.Fatalf("turn %d:\n got %+v\nwant %+v (status %s)", got.Turn, got, want, status)
	}
	if got.EndedAt == nil || got.DurationMs != got.EndedAt.Sub(got.StartedAt).Milliseconds() || got.PendingApprovals != 0 {
		t.Fatalf("turn %d timing %+v", got.Turn, got)
	}
}

// TestTurnResourcesMatchTheLog runs text, tool, cancelled, failed and retried turns and checks
// each turn resource, the session's status and totals, and the turn each post announced.
func TestTurnResourcesMatchTheLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionCreate(t, e.keyA).String()
	if s := e.sessionOf(t, sid); s.Status != "idle" || s.Turn != nil || *s.LastTurn != 0 || *s.Usage != (usageView{}) {
		t.Fatalf("new session %+v", s)
	}

	a1 := e.postText(t, sid, "text")
	t1 := e.endedTurn(t, sid, 1)
	a2 := e.postText(t, sid, "tools:2")
	t2 := e.endedTurn(t, sid, 2)
	a3 := e.postText(t, sid, `tool:sleep args:{"ms":60000}`)
	waitUntil(t, "the sleep to run", func() bool {
		s, l := e.sessionOf(t, sid), e.listedOf(t, sid)
		r := e.do(t, "GET", "/v1/sessions/"+sid+"/turns/3", e.keyA, nil)
		if r.status == http.StatusNotFound { // the post is accepted; its turn has not started yet
			return false
		}
		var tr turnView
		r.want(t, 200).json(t, &tr)
		return s.Status == "running" && s.Turn != nil && *s.Turn == 3 && l.Status == "running" && tr.Status == "running" &&
			tr.Usage.ToolCalls == 1 && tr.EndedAt == nil
	})
	e.do(t, "POST", "/v1/sessions/"+sid+"/cancel", e.keyA, nil).want(t, 200)
	t3 := e.endedTurn(t, sid, 3)
	a4 := e.postText(t, sid, "fail:INVALID_CREDENTIAL")
	t4 := e.endedTurn(t, sid, 4)
	a5 := e.postText(t, sid, "fail:SERVER failtimes:1")
	t5 := e.endedTurn(t, sid, 5)

	evs := e.wholeLog(t, uuidOf(t, sid))
	matchLog(t, t1, evs, "completed")
	matchLog(t, t2, evs, "completed")
	matchLog(t, t3, evs, "cancelled")
	matchLog(t, t4, evs, "failed")
	matchLog(t, t5, evs, "completed")
	for i, a := range []accepted{a1, a2, a3, a4, a5} {
		tr := []turnView{t1, t2, t3, t4, t5}[i]
		if a.Turn == nil || *a.Turn != i+1 || len(tr.MessageIDs) != 1 || tr.MessageIDs[0] != a.MessageID {
			t.Fatalf("post %d announced turn %v; turn %d entered %v, not %s", i+1, a.Turn, i+1, tr.MessageIDs, a.MessageID)
		}
	}
	if t1.Steps != 1 || t1.Usage.ModelCalls != 1 || t1.Usage.OutputTokens == 0 || t1.Usage.ToolCalls != 0 {
		t.Fatalf("text turn %+v", t1)
	}
	if t2.Steps != 2 || t2.Usage.ToolCalls != 2 || t2.Usage.ToolErrors != 0 || t2.Usage.ModelCalls != 2 {
		t.Fatalf("tool turn %+v", t2)
	}
	if t3.Usage.ToolCalls != 1 || t3.Usage.ToolErrors != 1 || !strings.Contains(string(t3.EndReason), `"user"`) {
		t.Fatalf("cancelled turn %+v", t3)
	}
	if t4.Usage.ModelErrors != 1 || t4.Usage.ModelCalls != 1 || !strings.Contains(string(t4.EndReason), "INVALID_CREDENTIAL") {
		t.Fatalf("failed turn %+v", t4)
	}
	if t5.Usage.ModelErrors != 1 || t5.Usage.ModelCalls != 2 {
		t.Fatalf("retried turn %+v", t5)
	}

	// The list, one turn at a time, and the session's totals.
	var all []turnView
	cursor := ""
	for {
		var p struct {
			Items      []turnView
			NextCursor string
		}
		e.do(t, "GET", "/v1/sessions/"+sid+"/turns?limit=2&cursor="+cursor, e.keyA, nil).want(t, 200).json(t, &p)
		all = append(all, p.Items...)
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	var total usageView
	for i, tr := range all {
		want := []turnView{t1, t2, t3, t4, t5}[i]
		if tr.Turn != i+1 || tr.FirstSeq != want.FirstSeq || tr.Usage != want.Usage {
			t.Fatalf("listed turn %+v, want %+v", tr, want)
		}
		total.InputTokens += tr.Usage.InputTokens
		total.OutputTokens += tr.Usage.OutputTokens
		total.CacheReadTokens += tr.Usage.CacheReadTokens
		total.CacheMissTokens += tr.Usage.CacheMissTokens
		total.ReasoningTokens += tr.Usage.ReasoningTokens
		total.ModelCalls += tr.Usage.ModelCalls
		total.ToolCalls += tr.Usage.ToolCalls
		total.ToolErrors += tr.Usage.ToolErrors
		total.ModelErrors += tr.Usage.ModelErrors
	}
	if len(all) != 5 {
		t.Fatalf("%d turns listed", len(all))
	}
	waitUntil(t, "the session to be idle", func() bool { return e.sessionOf(t, sid).Status == "idle" })
	if s := e.sessionOf(t, sid); *s.Usage != total || *s.LastTurn != 5 || s.Turn != nil || e.listedOf(t, sid).Status != "idle" {
		t.Fatalf("session %+v, usage want %+v", s, total)
	}
}

// TestQueuedFollowupsAnnounceTheirTurns: followups posted while a turn runs name the turns that
// serve them, one per turn, in order.
func TestQueuedFollowupsAnnounceTheirTurns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionCreate(t, e.keyA).String()
	first := e.postText(t, sid, `tool:sleep args:{"ms":300}`)
	var next []accepted
	for range 3 {
		next = append(next, e.postText(t, sid, "text"))
	}
	for i, a := range append([]accepted{first}, next...) {
		tr := e.endedTurn(t, sid, i+1)
		if a.Turn == nil || *a.Turn != i+1 || len(tr.MessageIDs) != 1 || tr.MessageIDs[0] != a.MessageID {
			t.Fatalf("post %d announced turn %v; turn %d entered %v", i, a.Turn, i+1, tr.MessageIDs)
		}
	}
}

// TestCrashRepairedTurnResource: a turn a dead replica left open is stalled (the session queued
// for repair once a message waits), then interrupted, with the repair's failed result counted.
func TestCrashRepairedTurnResource(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.sessionCreate(t, e.keyA)
	sid := id.String()
	call := llm.ToolCallBlock("c1", "echo", `{"text":"x"}`)
	am := llm.Message{ID: "m1", Role: llm.RoleAssistant, Content: []llm.Block{call},
		Source: llm.Source{Kind: llm.SourceModel, Provider: "scripted", Model: "default"}}
	e.appendEvents(id,
		turnStart(1), stepStart(1, 1),
		eventlog.NewEvent{Type: "user/message", Data: llm.NewUserMessage("u0", "tools:1"), SurfaceOp: eventlog.Append},
		eventlog.NewEvent{Type: "assistant/message", Data: map[string]any{"turn": 1, "step": 1, "message": am,
			"usage": map[string]int{"inputTokens": 3, "outputTokens": 2}}, SurfaceOp: eventlog.Append, SourceEventSeqs: []int64{}},
		eventlog.NewEvent{Type: "tool/call", Data: map[string]any{"turn": 1, "step": 1, "callId": "c1", "name": "echo", "arguments": `{"text":"x"}`}})
	tr := e.turnOf(t, sid, 1)
	if tr.Status != "stalled" || tr.EndedAt != nil || tr.LastSeq != 4 || tr.Usage.ToolCalls != 1 || tr.Usage.OutputTokens != 2 ||
		string(tr.EndReason) != "null" || len(tr.MessageIDs) != 1 || tr.MessageIDs[0] != "u0" {
		t.Fatalf("open turn %+v", tr)
	}
	if s, l := e.sessionOf(t, sid), e.listedOf(t, sid); s.Status != "queued" || l.Status != "queued" || *s.LastTurn != 1 || *l.LastTurn != 1 {
		t.Fatalf("session with a stalled turn: %+v, listed %+v", s, l)
	}
	a := e.postText(t, sid, "text")
	if a.Turn == nil || *a.Turn != 2 {
		t.Fatalf("post announced turn %v", a.Turn)
	}
	t2 := e.endedTurn(t, sid, 2)
	evs := e.wholeLog(t, id)
	t1 := e.turnOf(t, sid, 1)
	matchLog(t, t1, evs, "interrupted")
	matchLog(t, t2, evs, "completed")
	if t1.Usage.ToolErrors != 1 || t1.Usage.ToolCalls != 1 || t2.MessageIDs[0] != a.MessageID {
		t.Fatalf("repaired turn %+v, next %+v", t1, t2)
	}
}

// TestWaitingApprovalStatus: a call that waits for a person makes the session and its turn
// waiting-approval, in the session, the list and the turn; the answer lets the turn end.
func TestWaitingApprovalStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionOfPreset(t, e.keyA, `{"name":"ask","model":{"provider":"scripted","model":"default"},"approval":{"policy":"ask","ask":["echo"]}}`)
	e.postText(t, sid, `tool:echo args:{"text":"x"}`)
	waitUntil(t, "waiting-approval", func() bool {
		return e.sessionOf(t, sid).Status == "waiting-approval" && e.listedOf(t, sid).Status == "waiting-approval"
	})
	tr := e.turnOf(t, sid, 1)
	if tr.Status != "waiting-approval" || tr.PendingApprovals != 1 {
		t.Fatalf("turn %+v", tr)
	}
	var aps struct{ Items []struct{ ID string } }
	e.do(t, "GET", "/v1/sessions/"+sid+"/approvals", e.keyA, nil).want(t, 200).json(t, &aps)
	e.do(t, "POST", "/v1/sessions/"+sid+"/approvals/"+aps.Items[0].ID, e.keyA, `{"outcome":"allowed-once"}`).want(t, 200)
	if tr := e.endedTurn(t, sid, 1); tr.Status != "completed" || tr.PendingApprovals != 0 || tr.Usage.ToolErrors != 0 {
		t.Fatalf("turn after the answer %+v", tr)
	}
}
