package agents_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/llm/openai"
	"github.com/dshd/dshd/pkg/preset"
)

func newAgents(t *testing.T) *agents.Agents {
	t.Helper()
	tools, err := agents.BuiltinTools(true)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agents.New(agents.Config{Tools: tools, Loop: agentloop.Config{RetryBackoff: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func presetOf(t *testing.T, body string) preset.Preset {
	t.Helper()
	var b preset.Body
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		t.Fatal(err)
	}
	b.Normalize()
	return preset.Preset{ID: uuid.New(), Version: 1, Body: b}
}

// run serves one message through the agent of p on an in-memory log and returns the log.
func run(t *testing.T, a *agents.Agents, p preset.Preset, text string) []eventlog.Event {
	t.Helper()
	cfg, release, err := a.Agent(agents.Session{ID: uuid.New(), Preset: p})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	j := eventlog.NewMemJournal(nil)
	_, err = j.Append(context.Background(), func(h eventlog.Head) ([]eventlog.NewEvent, error) {
		return []eventlog.NewEvent{{Type: eventlog.TypeInboxSpliced,
			Data: eventlog.Insertion(eventlog.InboxNextTurn, 0, llm.NewUserMessage("u1", text))}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agentloop.NewRunner(cfg, j).Serve(context.Background()); err != nil {
		t.Fatal(err)
	}
	return j.Events()
}

func find(evs []eventlog.Event, typ string) []string {
	var out []string
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, string(ev.Data))
		}
	}
	return out
}

func TestPresetAskGuardsToolUntilApprovalsExist(t *testing.T) {
	t.Parallel()
	a := newAgents(t)
	p := presetOf(t, `{"name":"p","model":{"provider":"scripted","model":"m"},"approval":{"ask":["sleep"]}}`)
	evs := run(t, a, p, `tool:sleep args:{"ms":1,"text":"z"}`)
	res := find(evs, eventlog.TypeToolResult)
	if len(res) != 1 || !strings.Contains(res[0], `Error: tool \"sleep\" requires approval (not yet supported)`) {
		t.Fatalf("results %v", res)
	}
	// Other tools and other presets are not affected.
	if res := find(run(t, a, p, "tools:1"), eventlog.TypeToolResult); strings.Contains(res[0], "isError\":true") {
		t.Fatalf("echo was guarded: %v", res)
	}
	free := presetOf(t, `{"name":"q","model":{"provider":"scripted","model":"m"}}`)
	if res := find(run(t, a, free, `tool:sleep args:{"ms":1,"text":"z"}`), eventlog.TypeToolResult); strings.Contains(res[0], "isError\":true") {
		t.Fatalf("sleep was guarded in another preset: %v", res)
	}
}

func TestPresetRestrictsToolsAndRendersPrompt(t *testing.T) {
	t.Parallel()
	a := newAgents(t)
	p := presetOf(t, `{"name":"p","model":{"provider":"scripted","model":"m"},
		"tools":{"allow":["echo","todo_write"],"toolOrder":["todo_write","<unlisted-tools>"]},
		"prompt":{"persona":"Persona for {{team}} on {{model}}.","sections":[{"name":"rules","order":5,"text":"Rule."}],
		"variables":{"team":"core"}}}`)
	res, err := a.Prompt(context.Background(), agents.Session{ID: uuid.New(), Preset: p})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.System, "Persona for core on m.\n\nRule.") {
		t.Fatalf("system %q", res.System)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "todo_write,echo" {
		t.Fatalf("tools %v", names)
	}
	// A call to a restricted-away tool is an unknown tool (SCP-6).
	out := find(run(t, a, p, `tool:sleep args:{"ms":1}`), eventlog.TypeToolResult)
	if len(out) != 1 || !strings.Contains(out[0], `unknown tool \"sleep\"`) {
		t.Fatalf("results %v", out)
	}
}

func TestPresetSetupFailureEndsTurnsWithTheError(t *testing.T) {
	t.Parallel()
	a := newAgents(t)
	p := presetOf(t, `{"name":"p","model":{"provider":"scripted","model":"m"},"tools":{"allow":["ghost"]}}`)
	ends := find(run(t, a, p, "text"), eventlog.TypeTurnEnd)
	if len(ends) != 1 || !strings.Contains(ends[0], `"code":"PROMPT_ASSEMBLY"`) || !strings.Contains(ends[0], "ghost") {
		t.Fatalf("turn/end %v", ends)
	}
}

func TestModelHostsGuardBaseURL(t *testing.T) {
	t.Parallel()
	a := newAgents(t)
	p := presetOf(t, `{"name":"p","model":{"provider":"openai","model":"m","baseUrl":"http://169.254.169.254/v1"}}`)
	if err := runnable(a, p); llm.ErrorCode(err) != llm.CodeNoAdapter {
		t.Fatalf("err %v, want NO_ADAPTER", err)
	}
}

func TestScriptedDisabled(t *testing.T) {
	t.Parallel()
	a, err := agents.New(agents.Config{ScriptedDisabled: true})
	if err != nil {
		t.Fatal(err)
	}
	p := presetOf(t, `{"name":"p","model":{"provider":"scripted","model":"m"}}`)
	if err := runnable(a, p); llm.ErrorCode(err) != llm.CodeNoAdapter {
		t.Fatalf("err %v, want NO_ADAPTER", err)
	}
	// On by default.
	if err := runnable(newAgents(t), p); err != nil {
		t.Fatal(err)
	}
}

// runnable reports whether the agents can run p: the error of a prompt of a new session of p
// (an unrunnable preset's agent is built, but its prompt and turns fail with the reason).
func runnable(a *agents.Agents, p preset.Preset) error {
	_, err := a.Prompt(context.Background(), agents.Session{ID: uuid.New(), Preset: p})
	return err
}

// TestModelHostsSameRuleAsValidation: the run-time check is openai.AllowedBaseURL, the rule
// preset validation applies, so a baseUrl valid when written is usable and one that slipped
// through (an older, laxer rule) is refused.
func TestModelHostsSameRuleAsValidation(t *testing.T) {
	t.Parallel()
	hosts := []string{"api.deepseek.com", "localhost", "127.0.0.1:9000"}
	a, err := agents.New(agents.Config{ModelHosts: hosts})
	if err != nil {
		t.Fatal(err)
	}
	for url, ok := range map[string]bool{
		"https://api.deepseek.com/v1":               true,
		"https://API.DeepSeek.com./v1":              true,
		"https://api.deepseek.com:443/v1":           true,
		"http://localhost/v1":                       true,
		"http://127.0.0.1:9000/v1":                  true,
		"http://localhost:8080/v1":                  false,
		"http://127.0.0.1/v1":                       false,
		"https://api.deepseek.com:8443/v1":          false,
		"https://api.deepseek.com@evil.example/v1":  false,
		"https://api.deepseek.com/v1?x=y":           false,
		"http://[::1]/v1":                           false,
		"https://api.deepseek.com.evil.example/v1/": false,
	} {
		body := `{"name":"p","model":{"provider":"openai","model":"m","baseUrl":"` + url + `"}}`
		b := presetOf(t, body).Body
		verr := preset.Rules{ModelHosts: hosts}.Validate(&b)
		aerr := runnable(a, presetOf(t, body))
		if (verr == nil) != ok || (aerr == nil) != ok {
			t.Errorf("%s: validation %v, agent %v; want ok=%v", url, verr, aerr, ok)
		}
		if aerr != nil && llm.ErrorCode(aerr) != llm.CodeNoAdapter {
			t.Errorf("%s: %v, want NO_ADAPTER", url, aerr)
		}
	}
}

// agentOf returns the agent of a new session of p.
func agentOf(a *agents.Agents, p preset.Preset) (agentloop.Config, func(), error) {
	return a.Agent(agents.Session{ID: uuid.New(), Preset: p})
}

// TestOperatorKeyOnlyForDeepSeek: the operator's DeepSeek key goes to the default DeepSeek
// endpoint only; a preset pointing at any other host (here a real local model server) gets
// requests without an Authorization header.
func TestOperatorKeyOnlyForDeepSeek(t *testing.T) {
	t.Parallel()
	ms := mockllm.New(mockllm.Config{})
	var mu sync.Mutex
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		ms.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(ms.Close)
	u, _ := url.Parse(srv.URL)

	a, err := agents.New(agents.Config{DeepSeekAPIKey: "sk-operator", ModelHosts: []string{"api.deepseek.com", u.Host},
		Loop: agentloop.Config{RetryBackoff: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	for _, provider := range []string{"openai", "deepseek"} {
		p := presetOf(t, `{"name":"p","model":{"provider":"`+provider+`","model":"m","baseUrl":"`+srv.URL+`/v1"}}`)
		if ends := find(run(t, a, p, "text"), eventlog.TypeTurnEnd); len(ends) != 1 || !strings.Contains(ends[0], "completed") {
			t.Fatalf("%s: turn/end %v", provider, ends)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(auth) == 0 || slices.ContainsFunc(auth, func(h string) bool { return h != "" }) {
		t.Fatalf("Authorization headers %q; want requests without one", auth)
	}

	// The same rules for both providers of the OpenAI wire (deepseek, the default, and openai),
	// each with clients of its own.
	for _, provider := range []string{"openai", "deepseek", ""} {
		keys := &sync.Map{}
		a, err := agents.New(agents.Config{DeepSeekAPIKey: "sk-operator", ModelHosts: []string{"api.deepseek.com", u.Host},
			OpenAIFunc: func(c openai.Config) llm.Provider {
				keys.Store(c.BaseURL, c.APIKey)
				return openai.New(c)
			}})
		if err != nil {
			t.Fatal(err)
		}
		checkOperatorKey(t, a, keys, provider, srv.URL)
	}
}

// checkOperatorKey checks which endpoints of presets of provider get the operator's key.
func checkOperatorKey(t *testing.T, a *agents.Agents, keys *sync.Map, provider, mockURL string) {
	t.Helper()
	for base, want := range map[string]string{
		"":                                 "sk-operator",
		"https://api.deepseek.com":         "sk-operator",
		"https://API.DeepSeek.com.:443/v1": "sk-operator",
		"http://api.deepseek.com":          "",
		mockURL + "/v1":                    "",
	} {
		var m map[string]string
		if provider == "" {
			m = map[string]string{"model": "m"}
		} else {
			m = map[string]string{"provider": provider, "model": "m"}
		}
		if base != "" {
			m["baseUrl"] = base
		}
		mb, _ := json.Marshal(m)
		body := `{"name":"p","model":` + string(mb) + `}`
		if _, release, err := agentOf(a, presetOf(t, body)); err != nil {
			t.Fatal(err)
		} else {
			release()
		}
		normalized := ""
		if base != "" {
			n, err := openai.AllowedBaseURL(base, []string{"*"})
			if err != nil {
				t.Fatal(err)
			}
			normalized = n.String()
		}
		got, _ := keys.Load(normalized)
		if got != want {
			t.Errorf("provider %q, baseUrl %q: client key %q, want %q", provider, base, got, want)
		}
	}
}

// TestDefaultToolTimeout: a tool without a timeout of its own is bounded by the default.
func TestDefaultToolTimeout(t *testing.T) {
	t.Parallel()
	tools, err := agents.BuiltinTools(true)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agents.New(agents.Config{Tools: tools, DefaultToolTimeoutMs: 50,
		Loop: agentloop.Config{RetryBackoff: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	p := presetOf(t, `{"name":"p","model":{"provider":"scripted","model":"m"}}`)
	start := time.Now()
	res := find(run(t, a, p, `tool:sleep args:{"ms":20000,"text":"z"}`), eventlog.TypeToolResult)
	if len(res) != 1 || !strings.Contains(res[0], "isError\":true") || !strings.Contains(strings.ToLower(res[0]), "time") {
		t.Fatalf("results %v", res)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the call ran %v", d)
	}
}
