package agents_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/policy"
)

// callEcho is the scripted model's directive to call echo once with text.
func callEcho(text string) string {
	args, _ := json.Marshal(map[string]string{"text": text})
	return "tool:echo args:" + url.PathEscape(string(args))
}

// policyResult is the one tool/result of a run: the result's text, isError and error info.
type policyResult struct {
	text    string
	isError bool
	info    *fault.Info
}

func oneToolResult(t *testing.T, evs []eventlog.Event) policyResult {
	t.Helper()
	res := find(evs, eventlog.TypeToolResult)
	if len(res) != 1 {
		t.Fatalf("tool/result events %v", res)
	}
	var tr eventlog.ToolResult
	if err := json.Unmarshal([]byte(res[0]), &tr); err != nil {
		t.Fatal(err)
	}
	block := tr.Message.Content[0]
	if block.Type != llm.BlockToolResult || len(block.Content) != 1 {
		t.Fatalf("tool/result %s", res[0])
	}
	return policyResult{text: block.Content[0].Text, isError: block.IsError, info: tr.Error}
}

var denied = &fault.Info{Name: "ToolDeniedError", Code: fault.CodeToolDenied}

// policyPreset has a pre-execute deny, a guard and a post-execute block, each on echo calls
// whose text matches its regexp; a pre-execute allow of every other call; and an approval ask
// of echo, which the allow skips.
const policyPreset = `{"name":"p","model":{"provider":"scripted","model":"m"},"approval":{"ask":["echo"]},
	"policies":{
		"preExecute":[{"tools":["echo"],"match":{"text":"^rm "},"decision":"deny","reason":"rm is not allowed"},
			{"tools":["echo"],"match":{"text":"^ask"},"decision":"ask","reason":"a person must look"},
			{"tools":["*"],"decision":"allow"}],
		"guards":[{"tools":["echo"],"match":{"text":"^sudo"},"reason":"no sudo for agents"}],
		"postExecute":[{"tools":["echo"],"match":{"text":"secret"},"action":"block","feedback":"the output is withheld"},
			{"tools":["echo"],"match":{"text":"^note"},"action":"addContext","context":"remember the note"}]}}`

// TestPIPE5_PolicyDenyOverAgentLoop: a preset's pre-execute deny ends the call with `Error:
// <reason>`, isError and {ToolDeniedError, TOOL_DENIED} in its tool/result event.
func TestPIPE5_PolicyDenyOverAgentLoop(t *testing.T) {
	t.Parallel()
	a := newAgents(t)
	p := presetOf(t, policyPreset)
	got := oneToolResult(t, run(t, a, p, callEcho("rm -rf /")))
	if got.text != "Error: rm is not allowed" || !got.isError || *got.info != *denied {
		t.Fatalf("tool/result %+v", got)
	}
	// The allow rule lets other calls run, and skips the preset's approval.ask of echo.
	if got := oneToolResult(t, run(t, a, p, callEcho("hello"))); got.text != "hello" || got.isError || got.info != nil {
		t.Fatalf("tool/result %+v", got)
	}
}

// TestGRD2_PolicyGuardOverAgentLoop: a preset's guard denies a call (the allow rule does not
// override it) with `Error: <reason>`, while echo stays among the model's tools.
func TestGRD2_PolicyGuardOverAgentLoop(t *testing.T) {
	t.Parallel()
	a := newAgents(t)
	p := presetOf(t, policyPreset)
	got := oneToolResult(t, run(t, a, p, callEcho("sudo reboot")))
	if got.text != "Error: no sudo for agents" || !got.isError || *got.info != *denied {
		t.Fatalf("tool/result %+v", got)
	}
	res, err := a.Prompt(context.Background(), agents.Session{ID: uuid.New(), Preset: p})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(res.Tools, func(s llm.ToolSchema) bool { return s.Name == "echo" }) {
		t.Fatalf("echo is not visible: %v", res.Tools)
	}
}

// TestPIPE15_PolicyBlockOverAgentLoop: a preset's post-execute block makes the result a failure
// whose content is the feedback text, with no error code.
func TestPIPE15_PolicyBlockOverAgentLoop(t *testing.T) {
	t.Parallel()
	a := newAgents(t)
	got := oneToolResult(t, run(t, a, presetOf(t, policyPreset), callEcho("the secret is 42")))
	if got.text != "the output is withheld" || !got.isError || got.info != nil {
		t.Fatalf("tool/result %+v", got)
	}
}

// TestLOOP6_PolicyAddContextOverAgentLoop: an addContext rule's text is a user message at the
// start of the next step, after the call's tool/result.
func TestLOOP6_PolicyAddContextOverAgentLoop(t *testing.T) {
	t.Parallel()
	a := newAgents(t)
	evs := run(t, a, presetOf(t, policyPreset), callEcho("note this"))
	result, context := -1, -1
	for i, ev := range evs {
		switch {
		case ev.Type == eventlog.TypeToolResult:
			result = i
		case ev.Type == eventlog.TypeUserMessage && strings.Contains(string(ev.Data), "remember the note"):
			context = i
		}
	}
	if result < 0 || context < result {
		t.Fatalf("tool/result at %d, the context's user/message at %d", result, context)
	}
	if !slices.ContainsFunc(evs[result:context], func(ev eventlog.Event) bool { return ev.Type == eventlog.TypeStepStart }) {
		t.Fatal("the context was not delivered at the start of the next step")
	}
}

// TestAPR1_PolicyAskOverAgentLoop: an ask rule goes through the preset's approval settings: under
// policy never it is rejected; under ask, with no approval service, denied with its reason.
func TestAPR1_PolicyAskOverAgentLoop(t *testing.T) {
	t.Parallel()
	a := newAgents(t)
	got := oneToolResult(t, run(t, a, presetOf(t, policyPreset), callEcho("ask me")))
	if got.text != "Error: a person must look" || !got.isError || *got.info != *denied {
		t.Fatalf("tool/result %+v", got)
	}
	never := strings.Replace(policyPreset, `"approval":{`, `"approval":{"policy":"never",`, 1)
	got = oneToolResult(t, run(t, a, presetOf(t, never), callEcho("ask me")))
	if got.text != `Error: the user rejected tool "echo"` || got.info.Code != fault.CodeApprovalRejected {
		t.Fatalf("tool/result %+v", got)
	}
}

// TestPolicyWebhookOverAgentLoop: a preset's pre-execute webhook (a real HTTP server, reached
// under the operator settings of tests) gets requests signed with the preset's secret and
// decides the calls: allow runs, deny fails with its reason, and a webhook that does not answer
// within the preset's timeout denies the call.
func TestPolicyWebhookOverAgentLoop(t *testing.T) {
	t.Parallel()
	key := []byte("operator webhook key")
	var mu sync.Mutex
	var bad []string
	p := presetOf(t, `{"name":"p","model":{"provider":"scripted","model":"m"}}`)
	secret := policy.Secret(key, p.ID)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req policy.BatchRequest
		_ = json.Unmarshal(body, &req)
		mu.Lock()
		if err := policy.Verify(secret, r.Header.Get(policy.HeaderSignature), body, time.Now(), time.Minute); err != nil {
			bad = append(bad, err.Error())
		}
		if req.PresetID != p.ID.String() || req.PresetVersion != 1 || len(req.Calls) != 1 || req.Calls[0].Tool != "echo" || req.SessionID == "" {
			bad = append(bad, string(body))
		}
		mu.Unlock()
		var text string
		var ans policy.BatchAnswer
		for _, c := range req.Calls {
			_ = json.Unmarshal(c.Arguments, &struct{ Text *string }{&text})
			d := policy.BatchDecision{CallID: c.CallID}
			switch text {
			case "slow":
				<-release
			case "allowed":
				d.Decision = "allow"
			default:
				d.Decision, d.Reason = "deny", "the webhook says no"
			}
			ans.Decisions = append(ans.Decisions, d)
		}
		_ = json.NewEncoder(w).Encode(ans)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })

	a := newAgentsWith(t, func(c *agents.Config) {
		c.PolicyWebhooks = agents.PolicyWebhooks{Key: key, AllowHTTP: true, AllowPrivate: true}
	})
	p.Policies.Webhooks.PreExecute = srv.URL + "/pre"
	*p.Policies.Webhooks.TimeoutMs = 300
	if err := a.Rules().Validate(&p.Body); err != nil {
		t.Fatal(err)
	}
	for text, want := range map[string]policyResult{
		"allowed": {text: "allowed"},
		"other":   {text: "Error: the webhook says no", isError: true, info: denied},
		"slow":    {text: "Error: pre-execute policy webhook failed: the webhook did not answer within 300ms", isError: true, info: denied},
	} {
		got := oneToolResult(t, run(t, a, p, callEcho(text)))
		if got.text != want.text || got.isError != want.isError || (got.info == nil) != (want.info == nil) ||
			(got.info != nil && *got.info != *want.info) {
			t.Errorf("%s: tool/result %+v, want %+v", text, got, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("bad requests: %v", bad)
	}

	// Servers without a webhook key refuse such presets.
	if err := newAgents(t).Rules().Validate(&p.Body); err == nil || !strings.Contains(err.Error(), "policy webhooks are disabled") {
		t.Fatalf("validation without a key: %v", err)
	}
}

// TestE5_AgentLoopAsksTheWebhookOncePerGroup: over the agent loop (the scheduler wired with
// the preset's group hook), a step of 64 parallel echo calls asks the pre-execute webhook once,
// with the 64 calls, and each runs as its entry allows (issue 18: it was 64 requests, one after
// another).
func TestE5_AgentLoopAsksTheWebhookOncePerGroup(t *testing.T) {
	t.Parallel()
	key := []byte("operator webhook key")
	var mu sync.Mutex
	var sizes []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req policy.BatchRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		sizes = append(sizes, len(req.Calls))
		mu.Unlock()
		var ans policy.BatchAnswer
		for _, c := range req.Calls {
			ans.Decisions = append(ans.Decisions, policy.BatchDecision{CallID: c.CallID, PreAnswer: policy.PreAnswer{Decision: "allow"}})
		}
		_ = json.NewEncoder(w).Encode(ans)
	}))
	t.Cleanup(srv.Close)
	a := newAgentsWith(t, func(c *agents.Config) {
		c.PolicyWebhooks = agents.PolicyWebhooks{Key: key, AllowHTTP: true, AllowPrivate: true}
	})
	p := presetOf(t, `{"name":"p","model":{"provider":"scripted","model":"m"}}`)
	p.Policies.Webhooks.PreExecute = srv.URL + "/pre"
	if err := a.Rules().Validate(&p.Body); err != nil {
		t.Fatal(err)
	}
	res := find(run(t, a, p, "tools:64"), eventlog.TypeToolResult)
	if len(res) != 64 || slices.ContainsFunc(res, func(s string) bool { return strings.Contains(s, `"isError":true`) }) {
		t.Fatalf("%d results: %v", len(res), res)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(sizes, []int{64}) {
		t.Fatalf("requests of %v calls, want one of 64", sizes)
	}
}
