package api_test

import (
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"reflect"
	"testing"

	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/pkg/eventlog"
)

// TestEventSchemaDescribesTheLog: every event of a real turn (a model call, a tool call and its
// result, the streamed chunks), as the SSE stream sends it and as the log holds it, matches
// openapi.yaml's Event (generated from pkg/eventlog by internal/openapigen), and an event of a
// kind with a payload type matches that kind's own branch, not the catch-alls.
func TestEventSchemaDescribesTheLog(t *testing.T) {
	t.Parallel()
	m := mockllm.New(mockllm.Config{})
	ms := httptest.NewServer(m.Handler())
	t.Cleanup(func() { m.Close(); ms.Close() })
	u, _ := url.Parse(ms.URL)
	e := newEnvHosts(t, u.Host)
	sid := e.sessionOfPreset(t, e.keyA, `{"name":"mock","model":{"provider":"openai","model":"mock","baseUrl":"`+ms.URL+`"}}`)
	streamed := postStreamTo(t, e.replica, "/v1/sessions/"+sid+"/messages/stream", e.keyA,
		`{"content":"tool:echo args:{\"text\":\"hi\"}"}`).untilEnd(t)
	_ = postStreamTo(t, e.replica, "/v1/sessions/"+sid+"/messages/stream", e.keyA, `{"content":"note","mode":"inject"}`).untilEnd(t)
	logged := e.allEvents(t, sid)
	if len(streamed) < 10 || len(logged) <= len(streamed) {
		t.Fatalf("%d events streamed, %d logged", len(streamed), len(logged))
	}
	branch := map[string]string{}
	for _, p := range eventlog.Payloads() {
		branch[p.Type()] = "Event" + reflect.TypeOf(p).Elem().Name()
	}
	seen := map[string]bool{}
	for name, evs := range map[string][]eventlog.Event{"streamed": streamed, "logged": logged} {
		for _, ev := range evs {
			b, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			var v any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			if err := kinSchema("Event", v); err != nil {
				t.Errorf("%s event %d does not match Event (kin-openapi): %v\n%s", name, ev.Seq, err, b)
			}
			ref, ok := branch[ev.Type]
			if !ok {
				t.Errorf("%s event %d: %s has no payload type", name, ev.Seq, ev.Type)
				continue
			}
			if err := kinSchema(ref, v); err != nil {
				t.Errorf("%s event %d does not match %s (kin-openapi): %v", name, ev.Seq, ref, err)
			}
			seen[ev.Type] = true
		}
	}
	for _, typ := range []string{"agent/inbox/spliced", "turn/start", "request/header", "assistant/chunk",
		"assistant/message", "tool/call", "tool/result", "step/end", "turn/end"} {
		if !seen[typ] {
			t.Errorf("the turn wrote no %s", typ)
		}
	}
}

// TestSES9_EventSchemaBranches: the Event schema takes a known kind only with its payload, a kind of
// the vocabulary without a payload type with any data, and a kind it does not know only when the
// event is ignorable (SES-9).
func TestSES9_EventSchemaBranches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}`, true},
		{`{"type":"turn/start","seq":0,"time":1,"data":{"turn":"one"}}`, false},
		{`{"type":"turn/start","seq":0,"time":1,"data":{}}`, false},
		{`{"type":"tool/call","seq":3,"time":1,"data":{"turn":1,"step":1,"callId":"c","name":"echo","arguments":"{}"}}`, true},
		{`{"type":"session/title","seq":0,"time":1,"data":{"title":"x"}}`, true},
		{`{"type":"compaction/anything","seq":0,"time":1,"data":[1,2]}`, true},
		{`{"type":"vendor/new-kind","seq":0,"time":1,"data":{"x":1},"ignorable":true}`, true},
		{`{"type":"vendor/new-kind","seq":0,"time":1,"data":{"x":1}}`, false},
		{`{"type":"turn/start","seq":0,"time":1,"data":{"turn":1},"extra":1}`, false},
	} {
		var v any
		if err := json.Unmarshal([]byte(tc.body), &v); err != nil {
			t.Fatal(err)
		}
		if err := kinSchema("Event", v); (err == nil) != tc.ok {
			t.Errorf("%s: kin-openapi says %v, want valid %v", tc.body, err, tc.ok)
		}
	}
}
