package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/policy"
	"github.com/dshd/dshd/pkg/registry"
)

const secret = "whsec_test"

// hook is a webhook server that verifies every request's signature and answers with answer.
type hook struct {
	mu       sync.Mutex
	requests []map[string]any
	events   []string
	bad      []string
	answer   func(w http.ResponseWriter, req map[string]any)
}

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req map[string]any
	h.mu.Lock()
	if err := policy.Verify(secret, r.Header.Get(policy.HeaderSignature), body, time.Now(), time.Minute); err != nil {
		h.bad = append(h.bad, err.Error())
	}
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &req) != nil {
		h.bad = append(h.bad, "not a JSON POST")
	}
	h.requests = append(h.requests, req)
	h.events = append(h.events, r.Header.Get(policy.HeaderEvent))
	answer := h.answer
	h.mu.Unlock()
	answer(w, req)
}

func answerJSON(v string) func(http.ResponseWriter, map[string]any) {
	return func(w http.ResponseWriter, _ map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, v)
	}
}

// answerAll answers a batch request with the decision fields (`"decision":"allow"`, a JSON
// object's members) for every call it carries.
func answerAll(fields string) func(http.ResponseWriter, map[string]any) {
	return func(w http.ResponseWriter, req map[string]any) {
		calls, _ := req["calls"].([]any)
		var ds []string
		for _, c := range calls {
			id, _ := json.Marshal(c.(map[string]any)["callId"])
			ds = append(ds, `{"callId":`+string(id)+`,`+fields+`}`)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"decisions":[`+strings.Join(ds, ",")+`]}`)
	}
}

func (h *hook) set(f func(http.ResponseWriter, map[string]any)) {
	h.mu.Lock()
	h.answer = f
	h.mu.Unlock()
}

// webhookEnv serves h over plain HTTP on 127.0.0.1 and installs block (with %s for the URL) with
// a client that allows http and private addresses, the operator settings of tests.
func webhookEnv(t *testing.T, h *hook, block string) *env {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	e := newEnv(t, registry.Config{})
	client := policy.NewClient(policy.ClientConfig{AllowHTTP: true, AllowPrivate: true})
	e.install(fmt.Sprintf(block, srv.URL+"/hook"), policy.Env{Client: client, Secret: secret, PresetID: "p1", PresetVersion: 3})
	return e
}

// TestPolicyWebhookPreExecute: the pre-execute webhook gets a signed request describing the call
// and decides it: allow runs the body, deny fails it with the reason (E1 code), ask goes
// through the approval path. A fitting rule decides without it.
func TestPolicyWebhookPreExecute(t *testing.T) {
	t.Parallel()
	h := &hook{answer: answerAll(`"decision":"allow"`)}
	e := webhookEnv(t, h, `{"preExecute":[{"tools":["sh"],"decision":"deny","reason":"never sh"}],"webhooks":{"preExecute":%q}}`)
	wantSuccess(t, e.exec("echo", `{"text":"hi"}`), "hi")
	h.set(answerAll(`"decision":"deny","reason":"the webhook said no"`))
	wantDenied(t, e.exec("echo", `{"text":"hi"}`), "the webhook said no")
	h.set(answerAll(`"decision":"deny"`))
	wantDenied(t, e.exec("echo", `{"text":"hi"}`), `tool "echo" is denied by the pre-execute policy webhook`)
	h.set(answerAll(`"decision":"ask","reason":"a human must look"`))
	wantDenied(t, e.exec("echo", `{"text":"hi"}`), "a human must look") // no approval service mounted
	wantDenied(t, e.exec("sh", `{"command":"x"}`), "never sh")

	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.bad) > 0 || len(h.requests) != 4 {
		t.Fatalf("bad requests %v, %d requests", h.bad, len(h.requests))
	}
	want := map[string]any{"event": "preExecuteBatch", "presetId": "p1", "presetVersion": 3.0, "sessionId": "agent-1",
		"turn": 1.0, "step": 2.0, "calls": []any{map[string]any{"callId": "c1", "tool": "echo", "arguments": map[string]any{"text": "hi"}}}}
	if got := h.requests[0]; fmt.Sprint(got) != fmt.Sprint(want) || h.events[0] != "preExecuteBatch" {
		t.Fatalf("request %v (event %q), want %v", got, h.events[0], want)
	}
}

// TestPolicyWebhookFailsClosed: a webhook that times out, answers non-2xx, redirects, answers
// something else than a decision, answers in the per-call format of before E5, or is too large
// denies the call with a reason that says so.
func TestPolicyWebhookFailsClosed(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	h := &hook{}
	e := webhookEnv(t, h, `{"webhooks":{"preExecute":%q,"timeoutMs":200}}`)
	t.Cleanup(func() { close(release) }) // before the server closes (cleanups run last first)
	for _, tc := range []struct {
		answer func(http.ResponseWriter, map[string]any)
		reason string
	}{
		{func(http.ResponseWriter, map[string]any) { <-release }, "the webhook did not answer within 200ms"},
		{func(w http.ResponseWriter, _ map[string]any) { w.WriteHeader(500) }, "the webhook answered HTTP 500"},
		{func(w http.ResponseWriter, _ map[string]any) {
			http.Redirect(w, &http.Request{}, "http://example.com/", 302)
		},
			"the webhook answered HTTP 302 (redirects are not followed)"},
		{answerJSON(`not json`), "the webhook's answer is not a JSON object of the expected shape"},
		{answerAll(`"decision":"maybe"`), `the webhook answered an unknown decision "maybe" (want "allow", "deny" or "ask")`},
		{answerJSON(`{"decision":"allow"}`), `the webhook's answer has no decision for call "c1" (a "preExecuteBatch" request is answered with {"decisions": [{"callId", "decision", "reason"}, ...]})`},
		{answerJSON(`{"decisions":[{"callId":"c1","decision":"allow"}],"pad":"` + strings.Repeat("x", policy.MaxAnswerBytes) + `"}`),
			fmt.Sprintf("the webhook's answer is larger than %d bytes", policy.MaxAnswerBytes)},
	} {
		h.set(tc.answer)
		start := time.Now()
		wantDenied(t, e.exec("echo", `{"text":"hi"}`), "pre-execute policy webhook failed: "+tc.reason)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("%s: took %v", tc.reason, d)
		}
	}
	if e.runs.Load() != 0 {
		t.Fatalf("%d bodies ran", e.runs.Load())
	}
}

// TestPIPE7_PolicyWebhookCancelledCall: a call cancelled while its webhook is asked ends
// ABORTED_BEFORE_DISPATCH, not denied.
func TestPIPE7_PolicyWebhookCancelledCall(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	h := &hook{answer: func(http.ResponseWriter, map[string]any) { cancel(); <-release }}
	e := webhookEnv(t, h, `{"webhooks":{"preExecute":%q}}`)
	t.Cleanup(func() { close(release) })
	res := e.execCtx(ctx, "echo", `{"text":"hi"}`)
	if res.ErrorInfo() == nil || res.ErrorInfo().Code != fault.CodeAbortedBeforeDispatch || e.runs.Load() != 0 {
		t.Fatalf("result %+v (error %+v)", res, res.Error)
	}
}

// TestPolicyWebhookPostExecute: the post-execute webhook sees the result and may accept it,
// block it (a failure whose content is the feedback) or replace its content; a failing webhook
// blocks the result.
func TestPolicyWebhookPostExecute(t *testing.T) {
	t.Parallel()
	h := &hook{answer: answerJSON(`{"action":"accept"}`)}
	e := webhookEnv(t, h, `{"webhooks":{"postExecute":%q}}`)
	wantSuccess(t, e.exec("echo", `{"text":"hi"}`), "hi")
	h.set(answerJSON(`{"action":"block","feedback":"not for your eyes"}`))
	res := e.exec("echo", `{"text":"hi"}`)
	if !res.IsError || text(res) != "not for your eyes" || res.Error.Message != "not for your eyes" || res.Error.Info != nil {
		t.Fatalf("result %+v", res)
	}
	h.set(answerJSON(`{"action":"replace","content":"[redacted]"}`))
	res = e.exec("echo", `{"text":"hi"}`)
	wantSuccess(t, res, "[redacted]")
	if string(res.Value) != `"hi"` {
		t.Fatalf("value %s", res.Value)
	}
	h.set(func(w http.ResponseWriter, _ map[string]any) { w.WriteHeader(403) })
	res = e.exec("echo", `{"text":"hi"}`)
	if !res.IsError || text(res) != "post-execute policy webhook failed: the webhook answered HTTP 403" {
		t.Fatalf("result %+v", res)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	result, _ := h.requests[0]["result"].(map[string]any)
	if len(h.bad) > 0 || h.events[0] != "postExecute" || fmt.Sprint(result) != "map[content:[map[text:hi type:text]] isError:false]" {
		t.Fatalf("bad %v, event %q, result %v", h.bad, h.events[0], result)
	}
}

// TestPolicyWebhookTLS: an https webhook (httptest's TLS server, trusted through RootCAs) is
// called; without AllowHTTP an http URL fails closed.
func TestPolicyWebhookTLS(t *testing.T) {
	t.Parallel()
	h := &hook{answer: answerAll(`"decision":"deny","reason":"over TLS"`)}
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	client := policy.NewClient(policy.ClientConfig{AllowPrivate: true, RootCAs: roots})
	e := newEnv(t, registry.Config{})
	e.install(fmt.Sprintf(`{"webhooks":{"preExecute":%q}}`, srv.URL), policy.Env{Client: client, Secret: secret})
	wantDenied(t, e.exec("echo", `{"text":"hi"}`), "over TLS")

	plain := httptest.NewServer(h)
	t.Cleanup(plain.Close)
	e2 := newEnv(t, registry.Config{})
	e2.install(fmt.Sprintf(`{"webhooks":{"preExecute":%q}}`, plain.URL), policy.Env{Client: client, Secret: secret})
	wantDenied(t, e2.exec("echo", `{"text":"hi"}`),
		"pre-execute policy webhook failed: the webhook URL is not allowed: must be an https URL (this server allows no http webhooks)")
}

// TestPolicyWebhookRefusesPrivateAddresses: without AllowPrivate the client refuses, at dial
// time, every address that is not public: here 127.0.0.1, reached by IP and by a name that
// resolves to it. The server never sees a request.
func TestPolicyWebhookRefusesPrivateAddresses(t *testing.T) {
	t.Parallel()
	h := &hook{answer: answerJSON(`{"decision":"allow"}`)}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	client := policy.NewClient(policy.ClientConfig{AllowHTTP: true})
	for _, u := range []string{srv.URL, "http://localhost:" + port} {
		e := newEnv(t, registry.Config{})
		e.install(fmt.Sprintf(`{"webhooks":{"preExecute":%q}}`, u), policy.Env{Client: client, Secret: secret})
		res := e.exec("echo", `{"text":"hi"}`)
		if !res.IsError || !strings.Contains(text(res), "is not public (webhooks must not reach loopback, private or link-local addresses)") {
			t.Fatalf("%s: result %q", u, text(res))
		}
	}
	// Without a client (no signing key) a webhook fails closed too.
	e := newEnv(t, registry.Config{})
	e.install(fmt.Sprintf(`{"webhooks":{"preExecute":%q}}`, srv.URL))
	wantDenied(t, e.exec("echo", `{"text":"hi"}`), "pre-execute policy webhook failed: policy webhooks are disabled on this server")
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.requests) != 0 {
		t.Fatalf("%d requests reached the server", len(h.requests))
	}
}

func TestSignAndVerify(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"a":1}`)
	sig := policy.Sign(secret, now, body)
	if !strings.HasPrefix(sig, "t=1700000000,v1=") || len(sig) != len("t=1700000000,v1=")+64 {
		t.Fatalf("signature %q", sig)
	}
	if err := policy.Verify(secret, sig, body, now.Add(time.Minute), 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"other body":   policy.Verify(secret, sig, []byte(`{"a":2}`), now, time.Minute),
		"other secret": policy.Verify("whsec_other", sig, body, now, time.Minute),
		"too old":      policy.Verify(secret, sig, body, now.Add(time.Hour), time.Minute),
		"malformed":    policy.Verify(secret, "v1=00", body, now, time.Minute),
	} {
		if err == nil {
			t.Errorf("%s: verified", name)
		}
	}
	a, b := uuid.New(), uuid.New()
	key := []byte("operator key")
	if policy.Secret(key, a) != policy.Secret(key, a) || policy.Secret(key, a) == policy.Secret(key, b) ||
		policy.Secret(key, a) == policy.Secret([]byte("another key"), a) || !strings.HasPrefix(policy.Secret(key, a), "whsec_") {
		t.Fatal("secrets are not per preset and per key")
	}
}
