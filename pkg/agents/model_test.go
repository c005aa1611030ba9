package agents_test

import (
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/llm/openai"
)

// mockAgents returns agents whose deepseek and openai presets may point at a mock model server
// on a real port (its /v1 URL), with the clients they build recorded.
func mockAgents(t *testing.T) (*agents.Agents, *mockllm.Server, string, *sync.Map) {
	t.Helper()
	ms := mockllm.New(mockllm.Config{})
	srv := httptest.NewServer(ms.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(ms.Close)
	u, _ := url.Parse(srv.URL)
	var built sync.Map // base URL -> openai.Config
	a, err := agents.New(agents.Config{ModelHosts: []string{u.Host}, DeepSeekAPIKey: "sk-operator",
		Loop: agentloop.Config{RetryBackoff: time.Millisecond},
		OpenAIFunc: func(c openai.Config) llm.Provider {
			built.Store(c.BaseURL, c)
			return openai.New(c)
		}})
	if err != nil {
		t.Fatal(err)
	}
	return a, ms, srv.URL + "/v1", &built
}

func dataOf[T any](t *testing.T, raw string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return v
}

// TestLOOP4_PresetRetriesThenAnswer: a model that answers 500 three times, then normally, with
// the preset's model.retries 3: exactly four requests reach the server (the client does not
// retry by itself), three llm/retry events are logged, and the turn completes.
func TestLOOP4_PresetRetriesThenAnswer(t *testing.T) {
	t.Parallel()
	a, ms, base, built := mockAgents(t)
	p := presetOf(t, `{"name":"p","model":{"provider":"deepseek","model":"m","baseUrl":"`+base+`","retries":3}}`)
	evs := run(t, a, p, "text fail:SERVER failtimes:3")
	if ends := find(evs, eventlog.TypeTurnEnd); len(ends) != 1 || !strings.Contains(ends[0], `"kind":"completed"`) {
		t.Fatalf("turn/end %v", ends)
	}
	if n := len(ms.Requests()); n != 4 {
		t.Fatalf("%d requests reached the server, want 4", n)
	}
	retries := find(evs, eventlog.TypeLLMRetry)
	if len(retries) != 3 {
		t.Fatalf("llm/retry %v, want 3", retries)
	}
	for i, r := range retries {
		d := dataOf[map[string]any](t, r)
		if d["attempt"] != float64(i+1) || d["maxRetries"] != 3.0 || d["code"] != "SERVER" || d["status"] != 500.0 ||
			d["provider"] != "deepseek" || d["turn"] != 1.0 || d["step"] != 1.0 {
			t.Errorf("llm/retry %d: %s", i, r)
		}
	}
	if c, ok := built.Load(base); !ok || c.(openai.Config).MaxAttempts != 1 {
		t.Fatalf("client config %+v, want MaxAttempts 1", c)
	}
}

// TestLOOP4_PresetKeepsFailing: with the default model.retries (2) a model that keeps failing
// gets exactly three requests; the log ends with the failure chunk, step/end and turn/end with
// the error.
func TestLOOP4_PresetKeepsFailing(t *testing.T) {
	t.Parallel()
	a, ms, base, _ := mockAgents(t)
	p := presetOf(t, `{"name":"p","model":{"provider":"openai","model":"m","baseUrl":"`+base+`"}}`)
	evs := run(t, a, p, "fail:SERVER")
	if n := len(ms.Requests()); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
	if n := len(find(evs, eventlog.TypeLLMRetry)); n != 2 {
		t.Fatalf("%d llm/retry, want 2", n)
	}
	tail := evs[len(evs)-3:]
	if tail[0].Type != eventlog.TypeAssistantChunk || tail[1].Type != eventlog.TypeStepEnd || tail[2].Type != eventlog.TypeTurnEnd {
		t.Fatalf("log ends %s %s %s", tail[0].Type, tail[1].Type, tail[2].Type)
	}
	chunk := dataOf[struct {
		Chunk struct {
			Type   string `json:"type"`
			Reason struct {
				Kind    string         `json:"kind"`
				Failure map[string]any `json:"failure"`
			} `json:"reason"`
		} `json:"chunk"`
	}](t, string(tail[0].Data)).Chunk
	end := dataOf[struct {
		Reason struct {
			Kind  string         `json:"kind"`
			Error map[string]any `json:"error"`
		} `json:"reason"`
	}](t, string(tail[2].Data)).Reason
	if chunk.Type != "finish" || chunk.Reason.Kind != "error" || end.Kind != "error" ||
		end.Error["code"] != "SERVER" || end.Error["status"] != 500.0 || !reflect.DeepEqual(chunk.Reason.Failure, end.Error) {
		t.Fatalf("failure chunk %s, turn/end %s", tail[0].Data, tail[2].Data)
	}
	// model.retries 0: one request.
	ms.Reset()
	p = presetOf(t, `{"name":"p","model":{"provider":"openai","model":"m","baseUrl":"`+base+`","retries":0}}`)
	if evs := run(t, a, p, "fail:SERVER"); len(ms.Requests()) != 1 || len(find(evs, eventlog.TypeLLMRetry)) != 0 {
		t.Fatalf("retries 0: %d requests, llm/retry %v", len(ms.Requests()), find(evs, eventlog.TypeLLMRetry))
	}
}

// TestLOOP3_ProviderDefaultsInHeader: a deepseek preset's request/header records DeepSeek's
// maxTokens and reasoningEffort as adapter defaults, unless the preset sets them, and its
// request/context the context window; the request carries max_tokens. openai and scripted
// presets declare no defaults: their header is provider and model only, as before.
func TestLOOP3_ProviderDefaultsInHeader(t *testing.T) {
	t.Parallel()
	a, ms, base, _ := mockAgents(t)
	for _, tc := range []struct {
		model, config, defaults, context string
		maxTokens                        int
	}{
		{`"provider":"deepseek","model":"m","baseUrl":"` + base + `"`,
			`{"provider":"deepseek","model":"m","maxTokens":256000,"reasoningEffort":"off"}`,
			`{"maxTokens":true,"reasoningEffort":true}`, `{"provider":"deepseek","model":"m","contextWindow":1000000}`, 256000},
		{`"model":"m","baseUrl":"` + base + `","maxTokens":4096`,
			`{"provider":"deepseek","model":"m","maxTokens":4096,"reasoningEffort":"off"}`,
			`{"reasoningEffort":true}`, `{"provider":"deepseek","model":"m","contextWindow":1000000}`, 4096},
		{`"provider":"deepseek","model":"m","baseUrl":"` + base + `","maxTokens":10,"reasoningEffort":"high"`,
			`{"provider":"deepseek","model":"m","maxTokens":10,"reasoningEffort":"high"}`,
			`null`, `{"provider":"deepseek","model":"m","contextWindow":1000000}`, 10},
		{`"provider":"openai","model":"m","baseUrl":"` + base + `"`,
			`{"provider":"openai","model":"m"}`, `null`, `{"provider":"openai","model":"m"}`, 0},
		{`"provider":"scripted","model":"m"`,
			`{"provider":"scripted","model":"m"}`, `null`, `{"provider":"scripted","model":"m"}`, -1},
	} {
		ms.Reset()
		evs := run(t, a, presetOf(t, `{"name":"p","model":{`+tc.model+`}}`), "text")
		hd := find(evs, eventlog.TypeRequestHeader)
		if len(hd) != 1 {
			t.Fatalf("%s: headers %v", tc.model, hd)
		}
		h := dataOf[struct {
			Header struct {
				Config          json.RawMessage `json:"config"`
				AdapterDefaults json.RawMessage `json:"adapterDefaults"`
			} `json:"header"`
		}](t, hd[0]).Header
		if h.AdapterDefaults == nil {
			h.AdapterDefaults = json.RawMessage("null")
		}
		if !sameValue(t, h.Config, tc.config) || !sameValue(t, h.AdapterDefaults, tc.defaults) {
			t.Errorf("%s: header config %s adapterDefaults %s, want %s %s", tc.model, h.Config, h.AdapterDefaults, tc.config, tc.defaults)
		}
		if c := find(evs, eventlog.TypeRequestContext); len(c) != 1 || c[0] != tc.context {
			t.Errorf("%s: request/context %v, want %s", tc.model, c, tc.context)
		}
		if tc.maxTokens < 0 {
			continue // the scripted model is in process
		}
		var sent openai.ChatRequest
		if reqs := ms.Requests(); len(reqs) != 1 || json.Unmarshal(reqs[0], &sent) != nil || sent.MaxTokens != tc.maxTokens {
			t.Errorf("%s: sent max_tokens %d, want %d", tc.model, sent.MaxTokens, tc.maxTokens)
		}
	}
}

func sameValue(t *testing.T, got json.RawMessage, want string) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(got, &x) != nil || json.Unmarshal([]byte(want), &y) != nil {
		t.Fatalf("bad JSON %s / %s", got, want)
	}
	return reflect.DeepEqual(x, y)
}
