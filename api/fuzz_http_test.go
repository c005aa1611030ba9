package api_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/dshd/dshd/api"
)

// fuzzClient gives up on a response after a while: a fuzzed request must answer, not hang.
var fuzzClient = &http.Client{Timeout: 10 * time.Second}

// fuzzEnv is one database, one server and a session of a scripted preset for a fuzz target.
type fuzzEnv struct {
	*env
	preset, session string
}

func newFuzzEnv(f *testing.F) *fuzzEnv {
	e := newEnv(f, func(c *api.Config) { c.MaxStreamsPerSession, c.MaxStreamsPerTenant = 1000, 1000 })
	pid := e.presetCreate(f, e.keyA, minimalPreset)
	var s struct{ ID string }
	e.do(f, "POST", "/v1/sessions", e.keyA, `{"presetId":"`+pid.String()+`"}`).want(f, 201).json(f, &s)
	e.appendEvents(uuidOf(f, s.ID), turnStart(1), userEvent("u1", "one"), userEvent("u2", "two"), turnEnd(1))
	return &fuzzEnv{env: e, preset: pid.String(), session: s.ID}
}

// send makes a request and fails the test on a 5xx, or on an error answer that is not a problem
// document.
func (fe *fuzzEnv) send(t *testing.T, req *http.Request) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := fuzzClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") == "text/event-stream" {
		return // a stream answered 200; closing it ends it
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 500 {
		t.Fatalf("%s %s: %d %s", req.Method, req.URL, resp.StatusCode, body)
	}
	if resp.StatusCode >= 400 && resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%s %s: %d with %q", req.Method, req.URL, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// sendable skips a header value that net/http's client refuses to send (control characters).
func sendable(t *testing.T, v string) {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			t.Skip("not a header value a client can send")
		}
	}
}

// FuzzHTTPRequestBodies posts fuzzed bodies with fuzzed Content-Types to every endpoint that
// takes a body, through the real router over a real database: no answer is a 5xx. Seeds:
// testdata/fuzz/FuzzHTTPRequestBodies.
func FuzzHTTPRequestBodies(f *testing.F) {
	fe := newFuzzEnv(f)
	f.Add(uint8(0), "application/json", []byte(minimalPreset))
	f.Fuzz(func(t *testing.T, endpoint uint8, contentType string, body []byte) {
		targets := []struct{ method, path, key string }{
			{"POST", "/v1/presets", fe.keyA},
			{"POST", "/v1/sessions", fe.keyA},
			{"POST", "/v1/sessions/" + fe.session + "/messages", fe.keyA},
			{"PUT", "/v1/presets/" + fe.preset, fe.keyA},
			{"POST", "/v1/tenants", adminToken},
			{"POST", "/v1/sessions/" + fe.session + "/cancel", fe.keyA},
		}
		tg := targets[int(endpoint)%len(targets)]
		req, err := http.NewRequest(tg.method, fe.url+tg.path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tg.key)
		if contentType != "" {
			sendable(t, contentType)
			req.Header["Content-Type"] = []string{contentType}
		}
		fe.send(t, req)
	})
}

// FuzzHTTPListCursors sends fuzzed cursors and limits to the lists and the history: no answer
// is a 5xx. Seeds: testdata/fuzz/FuzzHTTPListCursors.
func FuzzHTTPListCursors(f *testing.F) {
	fe := newFuzzEnv(f)
	f.Add(uint8(0), "garbage", "1")
	f.Fuzz(func(t *testing.T, list uint8, cursor, limit string) {
		paths := []string{"/v1/sessions", "/v1/presets", "/v1/sessions/" + fe.session + "/history"}
		q := url.Values{"cursor": {cursor}}
		if limit != "" {
			q.Set("limit", limit)
		}
		req, err := http.NewRequest("GET", fe.url+paths[int(list)%len(paths)]+"?"+q.Encode(), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+fe.keyA)
		fe.send(t, req)
	})
}

// FuzzHTTPEventQuery sends fuzzed ?after=, ?limit=, ?types= and Last-Event-ID to the event log,
// as a JSON page or a stream (which is closed as soon as it answers): no answer is a 5xx. Seeds:
// testdata/fuzz/FuzzHTTPEventQuery.
func FuzzHTTPEventQuery(f *testing.F) {
	fe := newFuzzEnv(f)
	f.Add("-1", "100", "turn/start", "", false)
	f.Fuzz(func(t *testing.T, after, limit, types, lastEventID string, stream bool) {
		q := url.Values{}
		for k, v := range map[string]string{"after": after, "limit": limit, "types": types} {
			if v != "" {
				q.Set(k, v)
			}
		}
		req, err := http.NewRequest("GET", fe.url+"/v1/sessions/"+fe.session+"/events?"+q.Encode(), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+fe.keyA)
		if lastEventID != "" {
			sendable(t, lastEventID)
			req.Header["Last-Event-Id"] = []string{lastEventID}
		}
		if stream {
			req.Header.Set("Accept", "text/event-stream")
		}
		fe.send(t, req)
	})
}
