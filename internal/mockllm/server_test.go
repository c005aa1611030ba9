package mockllm_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/pkg/llm/openai"
)

func start(t *testing.T) (*mockllm.Server, string) {
	t.Helper()
	ms := mockllm.New(mockllm.Config{})
	srv := httptest.NewServer(ms.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(ms.Close)
	return ms, srv.URL
}

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, string(data)
}

func TestRequestsRecordedAndReset(t *testing.T) {
	t.Parallel()
	ms, url := start(t)
	body := `{"model":"m","messages":[{"role":"user","content":"text"}]}`
	for _, path := range []string{"/v1/chat/completions", "/chat/completions"} {
		if resp, data := post(t, url+path, body); resp.StatusCode != 200 || !strings.Contains(data, "Done after 0 steps") {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, data)
		}
	}
	resp, err := http.Get(url + "/_requests")
	if err != nil {
		t.Fatal(err)
	}
	var got []json.RawMessage
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || len(got) != 2 || string(got[0]) != body || len(ms.Requests()) != 2 {
		t.Fatalf("requests %s (%v)", got, err)
	}
	if resp, _ := post(t, url+"/_reset", ""); resp.StatusCode != http.StatusNoContent || len(ms.Requests()) != 0 {
		t.Fatalf("reset: %d, %d requests left", resp.StatusCode, len(ms.Requests()))
	}
}

func TestToolPairsValidated(t *testing.T) {
	t.Parallel()
	_, url := start(t)
	call := `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"echo","arguments":"{}"}}]}`
	tests := []struct {
		name, messages, want string
	}{
		{"call without result", `{"role":"user","content":"tools:1"},` + call, "did not have response messages: c1"},
		{"call without result before the next user message", `{"role":"user","content":"tools:1"},` + call + `,{"role":"user","content":"text"}`, "c1"},
		{"result without call", `{"role":"user","content":"text"},{"role":"tool","tool_call_id":"c9","content":"x"}`, "must be a response to a preceding message with 'tool_calls'"},
	}
	for _, tt := range tests {
		resp, data := post(t, url+"/v1/chat/completions", `{"model":"m","messages":[`+tt.messages+`]}`)
		var eb openai.ErrorBody
		if resp.StatusCode != 400 || json.Unmarshal([]byte(data), &eb) != nil || !strings.Contains(eb.Error.Message, tt.want) {
			t.Errorf("%s: %d %s", tt.name, resp.StatusCode, data)
		}
	}
	ok := `{"role":"user","content":"tools:1"},` + call + `,{"role":"tool","tool_call_id":"c1","content":"x"}`
	if resp, data := post(t, url+"/v1/chat/completions", `{"model":"m","messages":[`+ok+`]}`); resp.StatusCode != 200 || !strings.Contains(data, "Done after 1 steps and 1 tool results.") {
		t.Fatalf("paired: %d %s", resp.StatusCode, data)
	}
}

func TestStreamedWire(t *testing.T) {
	t.Parallel()
	_, url := start(t)
	resp, data := post(t, url+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"tools:2 keepalive:3"}]}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !strings.HasPrefix(data, strings.Repeat(": keep-alive\n\n", 3)+"data: {") || !strings.HasSuffix(data, "data: [DONE]\n\n") {
		t.Fatalf("body %q", data)
	}
	if strings.Contains(data, `"usage"`) {
		t.Fatal("usage sent without stream_options.include_usage")
	}
	if n := strings.Count(data, `"id":"call_1_`); n != 2 {
		t.Fatalf("%d call ids, want each call's id once, in its first delta", n)
	}
}

func TestFailuresAsProvidersSendThem(t *testing.T) {
	t.Parallel()
	_, url := start(t)
	tests := []struct {
		script     string
		status     int
		retryAfter string
	}{
		{"fail:RATE_LIMIT retryafter:3", 429, "3"},
		{"fail:SERVER", 500, ""},
		{"fail:INVALID_CREDENTIAL", 401, ""},
		{"fail:QUOTA", 402, ""},
		{"fail:CONTEXT_WINDOW_EXCEEDED", 400, ""},
	}
	for _, tt := range tests {
		resp, data := post(t, url+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"text `+tt.script+`"}]}`)
		if resp.StatusCode != tt.status || resp.Header.Get("Retry-After") != tt.retryAfter || !strings.Contains(data, `"error"`) {
			t.Errorf("%s: %d Retry-After %q %s", tt.script, resp.StatusCode, resp.Header.Get("Retry-After"), data)
		}
	}
	resp, err := http.Post(url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"text fail:TRANSPORT"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || !strings.HasPrefix(string(data), "data: ") {
		t.Fatalf("fail:TRANSPORT: read %q with err %v, want some data, then a broken connection", data, err)
	}
}

// TestCallsRecordTheAuthorizationHeader: GET /_calls pairs every request body with the key it
// carried (none is ""), so a test checks which tenant's key reached the model.
func TestCallsRecordTheAuthorizationHeader(t *testing.T) {
	t.Parallel()
	ms, url := start(t)
	body := `{"model":"m","messages":[{"role":"user","content":"text"}]}`
	for _, key := range []string{"Bearer key-one", ""} {
		req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := http.Get(url + "/_calls")
	if err != nil {
		t.Fatal(err)
	}
	var calls []mockllm.Call
	err = json.NewDecoder(resp.Body).Decode(&calls)
	resp.Body.Close()
	if err != nil || len(calls) != 2 || calls[0].Authorization != "Bearer key-one" || calls[1].Authorization != "" ||
		string(calls[0].Body) != body {
		t.Fatalf("calls %+v (%v)", calls, err)
	}
	ms.Reset()
	if len(ms.Calls()) != 0 {
		t.Fatal("calls kept after reset")
	}
}

// TestEchoKeyModel: a request for EchoKeyModel answers 401 with a message quoting the key sent.
func TestEchoKeyModel(t *testing.T) {
	t.Parallel()
	_, url := start(t)
	req, err := http.NewRequest("POST", url+"/v1/chat/completions",
		strings.NewReader(`{"model":"`+mockllm.EchoKeyModel+`","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer opaque.tenant-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body openai.ErrorBody
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body.Error.Message, "provided: opaque.tenant-key.") {
		t.Fatalf("%d %+v", resp.StatusCode, body)
	}
}
