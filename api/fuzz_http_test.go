package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/internal/contracttest"
)

// fuzzClient gives up on a response after a while: a fuzzed request must answer, not hang.
var fuzzClient = &http.Client{Timeout: 10 * time.Second, Transport: harnessClient.Transport}

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
// document. It returns the status and the body (none for a stream).
func (fe *fuzzEnv) send(t *testing.T, req *http.Request) (int, []byte) {
	t.Helper()
	// Lenient: the server may accept what the contract does not promise (a JSON body without a
	// Content-Type, say); a fuzzed request is about its answer, which is still validated.
	ctx, cancel := context.WithTimeout(contracttest.Lenient(context.Background()), 10*time.Second)
	defer cancel()
	resp, err := fuzzClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") == "text/event-stream" {
		return resp.StatusCode, nil // a stream answered 200; closing it ends it
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 500 {
		t.Fatalf("%s %s: %d %s", req.Method, req.URL, resp.StatusCode, body)
	}
	if resp.StatusCode >= 400 && resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%s %s: %d with %q", req.Method, req.URL, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return resp.StatusCode, body
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

// FuzzHTTPHeaders sends fuzzed Authorization and Idempotency-Key headers to a tenant's post and
// read routes and to an admin route. "{key}" in the Authorization value stands for the route's
// real credential (the tenant's API key or the admin token), so that the fuzzer mutates around
// a valid one. No answer is a 5xx or an error that is not a problem document; an Authorization
// that does not carry the credential answers 401; a post with a valid credential answers 400 for
// an Idempotency-Key longer than 255 characters or with a character that is not printable, and
// a post it accepts, sent again with the same key, answers the same message. Seeds:
// testdata/fuzz/FuzzHTTPHeaders.
func FuzzHTTPHeaders(f *testing.F) {
	fe := newFuzzEnv(f)
	f.Add(uint8(0), "Bearer {key}", "retry-1")
	f.Fuzz(func(t *testing.T, route uint8, authorization, idempotencyKey string) {
		sendable(t, authorization)
		sendable(t, idempotencyKey)
		targets := []struct{ method, path, cred, body string }{
			{"POST", "/v1/sessions/" + fe.session + "/messages", fe.keyA, `{"content":"fuzz","mode":"followup"}`},
			{"GET", "/v1/sessions/" + fe.session, fe.keyA, ""},
			{"GET", "/v1/tenants/" + fe.tenantA.String() + "/limits", adminToken, ""},
		}
		tg := targets[int(route)%len(targets)]
		auth := strings.ReplaceAll(authorization, "{key}", tg.cred)
		request := func() *http.Request {
			var body io.Reader
			if tg.body != "" {
				body = strings.NewReader(tg.body)
			}
			req, err := http.NewRequest(tg.method, fe.url+tg.path, body)
			if err != nil {
				t.Fatal(err)
			}
			if tg.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			if auth != "" {
				req.Header["Authorization"] = []string{auth}
			}
			if idempotencyKey != "" {
				req.Header["Idempotency-Key"] = []string{idempotencyKey}
			}
			return req
		}
		status, body := fe.send(t, request())
		if !strings.Contains(auth, tg.cred) {
			if status != http.StatusUnauthorized {
				t.Fatalf("Authorization %q without the credential: %d %s", auth, status, body)
			}
			return
		}
		if status == http.StatusUnauthorized || tg.method != "POST" {
			return // the credential is there but not as a bearer token
		}
		key := strings.Trim(idempotencyKey, " \t") // as the server reads a header value
		badKey := len(key) > 255 || !api.Printable(key)
		switch {
		case key != "" && badKey:
			if status != http.StatusBadRequest {
				t.Fatalf("Idempotency-Key %q: %d %s, want 400", idempotencyKey, status, body)
			}
		case key != "" && status == http.StatusAccepted:
			again, body2 := fe.send(t, request())
			if again == http.StatusAccepted && messageID(t, body2) != messageID(t, body) {
				t.Fatalf("Idempotency-Key %q: the retry answered %s, the post %s", idempotencyKey, body2, body)
			}
		}
	})
}

// messageID returns the messageId of a post's 202 answer.
func messageID(t *testing.T, body []byte) string {
	t.Helper()
	var p struct {
		MessageID string `json:"messageId"`
	}
	if err := json.Unmarshal(body, &p); err != nil || p.MessageID == "" {
		t.Fatalf("a 202 without a messageId: %s", body)
	}
	return p.MessageID
}
