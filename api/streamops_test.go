package api_test

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

// postStreamTo posts body to path on r (a message post) and returns the SSE answer; headers are
// name, value pairs set on the request (an Accept, say).
func postStreamTo(t testing.TB, r *replica, path, key, body string, headers ...string) *rawStream {
	t.Helper()
	req, err := http.NewRequest("POST", r.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := harnessClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: status %d: %s", path, resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("POST %s: Content-Type %q", path, ct)
	}
	s := &rawStream{resp: resp, frames: make(chan frame, 4096), done: make(chan error, 1)}
	go s.read()
	return s
}

// frames reads n event frames of s.
func (s *rawStream) eventFrames(t testing.TB, n int) []frame {
	t.Helper()
	out := make([]frame, 0, n)
	for range n {
		out = append(out, s.next(t))
	}
	return out
}

// TestEventsStreamOperation: GET /v1/sessions/{id}/events/stream (streamSessionEvents) streams
// the frames its alias, GET .../events with Accept: text/event-stream, streams: the backlog, then
// live events, whatever the request's Accept says; after and Last-Event-ID resume it as they do
// the alias.
func TestEventsStreamOperation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.Heartbeat = time.Hour })
	sid := e.sessionCreate(t, e.keyA)
	e.appendEvents(sid, turnStart(1),
		eventlog.NewEvent{Type: "user/message", Data: llm.NewUserMessage("u1", "hi"), SurfaceOp: eventlog.Append},
		stepStart(1, 1), chunk(1, 1, "x"), stepEnd(1, 1), turnEnd(1))
	url := streamURL(e.replica, sid)
	alias := openStream(t, url, e.keyA)
	op := openStream(t, url+"/stream", e.keyA, "Accept", "application/json")
	bare := openStream(t, url+"/stream", e.keyA, "Accept", "") // no Accept at all
	if ct := op.resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("the stream operation answers Content-Type %q", ct)
	}
	want := alias.eventFrames(t, 6)
	if got := op.eventFrames(t, 6); !slices.Equal(got, want) {
		t.Fatalf("the stream operation's backlog\n%v\nthe alias's\n%v", got, want)
	}
	if got := bare.eventFrames(t, 6); !slices.Equal(got, want) {
		t.Fatalf("the stream operation without Accept sent\n%v\nthe alias\n%v", got, want)
	}
	e.appendEvents(sid, turnStart(2))
	live := alias.next(t)
	if got := op.next(t); got != live || live.event != "turn/start" {
		t.Fatalf("the stream operation's live frame %v, the alias's %v", got, live)
	}
	if got := bare.next(t); got != live {
		t.Fatalf("the stream operation's live frame without Accept %v, the alias's %v", got, live)
	}

	// Resumption: ?after= and Last-Event-ID (which wins) as on the alias.
	for _, tc := range []struct {
		query   string
		headers []string
		first   string
	}{
		{"?after=2", nil, "3"},
		{"?after=2", []string{"Last-Event-ID", "4"}, "5"},
		{"?types=turn/start", nil, "0"},
	} {
		a := openStream(t, url+tc.query, e.keyA, tc.headers...)
		o := openStream(t, url+"/stream"+tc.query, e.keyA, append([]string{"Accept", "*/*"}, tc.headers...)...)
		fa, fo := a.next(t), o.next(t)
		if fa != fo || fo.id != tc.first {
			t.Errorf("%s %v: the stream operation starts with %v, the alias with %v, want id %s", tc.query, tc.headers, fo, fa, tc.first)
		}
		a.resp.Body.Close()
		o.resp.Body.Close()
	}

	// The path without Accept: text/event-stream is still the JSON page.
	var page struct{ Events []eventlog.Event }
	e.do(t, "GET", "/v1/sessions/"+sid.String()+"/events", e.keyA, nil).want(t, 200).json(t, &page)
	if len(page.Events) != 7 {
		t.Fatalf("the JSON page holds %d events, want 7", len(page.Events))
	}
}

// TestMessagesStreamOperation: POST /v1/sessions/{id}/messages/stream (postMessageStream) posts
// the message and streams what its alias, POST .../messages with Accept: text/event-stream,
// streams: the log's events from the message's splice to the end of the turn that serves it,
// whatever the request's Accept says.
func TestMessagesStreamOperation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.Heartbeat = time.Hour })
	// The same message to two new sessions of one preset, one through each path.
	aliasSid, opSid := e.sessionOfPreset(t, e.keyA, minimalPreset), e.sessionOfPreset(t, e.keyA, minimalPreset)
	viaAlias := postStreamTo(t, e.replica, "/v1/sessions/"+aliasSid+"/messages", e.keyA, `{"content":"hello"}`, "Accept", "text/event-stream").untilEnd(t)
	viaOp := postStreamTo(t, e.replica, "/v1/sessions/"+opSid+"/messages/stream", e.keyA, `{"content":"hello"}`, "Accept", "application/json").untilEnd(t)
	if !slices.Equal(types(viaOp), types(viaAlias)) {
		t.Fatalf("the stream operation streamed %v, the alias %v", types(viaOp), types(viaAlias))
	}
	if first := viaOp[0]; first.Type != "agent/inbox/spliced" {
		t.Fatalf("the stream operation's stream starts with %s", first.Type)
	}
	if last := viaOp[len(viaOp)-1]; last.Type != "turn/end" {
		t.Fatalf("the stream operation's stream ends with %s", last.Type)
	}
	// Each stream is exactly its log's events over its range: the same seqs on both paths.
	for name, tc := range map[string]struct {
		sid string
		evs []eventlog.Event
	}{"alias": {aliasSid, viaAlias}, "operation": {opSid, viaOp}} {
		log, from := e.allEvents(t, tc.sid), tc.evs[0].Seq
		if from != viaAlias[0].Seq || from+int64(len(tc.evs)) > int64(len(log)) ||
			!slices.EqualFunc(tc.evs, log[from:from+int64(len(tc.evs))], sameEvent) {
			t.Errorf("the %s's stream is not its log's events %d to %d", name, from, from+int64(len(tc.evs))-1)
		}
	}
	// An inject's stream on the operation is its splice alone, as on the alias.
	inj := postStreamTo(t, e.replica, "/v1/sessions/"+opSid+"/messages/stream", e.keyA, `{"content":"note","mode":"inject"}`).untilEnd(t)
	if len(inj) != 1 || inj[0].Type != "agent/inbox/spliced" {
		t.Fatalf("the inject's stream %v", types(inj))
	}
}

func sameEvent(a, b eventlog.Event) bool {
	return a.Seq == b.Seq && a.Type == b.Type && string(a.Data) == string(b.Data)
}
