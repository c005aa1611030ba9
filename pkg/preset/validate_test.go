package preset_test

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/preset"
)

// body decodes a preset body from JSON, failing the test on malformed JSON.
func body(t *testing.T, js string) preset.Body {
	t.Helper()
	var b preset.Body
	if err := json.Unmarshal([]byte(js), &b); err != nil {
		t.Fatalf("bad test JSON %s: %v", js, err)
	}
	return b
}

func TestValidateFillsDefaults(t *testing.T) {
	t.Parallel()
	b := body(t, `{"name":"n","model":{"provider":"scripted","model":"echo"}}`)
	if err := (preset.Rules{}).Validate(&b); err != nil {
		t.Fatal(err)
	}
	if b.Tools.Mode != preset.ModeNative || *b.Tools.MaxParallelToolCalls != 10 || *b.Tools.MaxParallelSubCalls != 10 {
		t.Errorf("tools defaults = %+v", b.Tools)
	}
	if b.Approval.Policy != preset.PolicyAsk || *b.Approval.TimeoutMs != preset.DefaultApprovalTimeoutMs {
		t.Errorf("approval defaults = %+v", b.Approval)
	}
	if *b.Limits.MaxSteps != preset.DefaultMaxSteps {
		t.Errorf("maxSteps = %d", *b.Limits.MaxSteps)
	}
	if *b.Model.Retries != preset.DefaultModelRetries || preset.DefaultModelRetries != 2 {
		t.Errorf("model.retries = %d", *b.Model.Retries)
	}
	out, _ := json.Marshal(b)
	for _, want := range []string{`"retries":2`, `"allow":[]`, `"deny":[]`, `"toolOrder":[]`, `"sections":[]`, `"variables":{}`, `"ask":[]`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("normalized JSON %s lacks %s", out, want)
		}
	}
}

func TestValidateTable(t *testing.T) {
	t.Parallel()
	const base = `"name":"n","model":{"provider":"scripted","model":"m"}`
	cases := []struct {
		name  string
		json  string
		field string // "" means valid
		msg   string
	}{
		{"minimal", `{` + base + `}`, "", ""},
		{"full", `{"name":"n","model":{"provider":"openai","model":"deepseek-chat","baseUrl":"https://api.deepseek.com/v1"},
			"tools":{"mode":"both","allow":["echo"],"deny":["bash"],"toolOrder":["zulu","<unlisted-tools>","alpha"],
			"maxParallelToolCalls":1,"maxParallelSubCalls":3},
			"prompt":{"persona":"p","sections":[{"name":"a","order":-1.5,"text":"x"},{"name":"b","order":0,"text":"y","complete":true}],
			"variables":{"user_name":"x","a1":"y"}},
			"approval":{"policy":"never","ask":["bash"],"timeoutMs":1000},"limits":{"maxSteps":3}}`, "", ""},
		{"no name", `{"model":{"provider":"scripted","model":"m"}}`, "name", "is required"},
		{"blank name", `{"name":"  ","model":{"provider":"scripted","model":"m"}}`, "name", "is required"},
		{"no provider is deepseek", `{"name":"n","model":{"model":"m"}}`, "", ""},
		{"deepseek with baseUrl", `{"name":"n","model":{"provider":"deepseek","model":"deepseek-chat","baseUrl":"https://api.deepseek.com"}}`, "", ""},
		{"unknown provider", `{"name":"n","model":{"provider":"anthropic","model":"m"}}`, "model.provider", `unknown provider "anthropic"`},
		{"retries zero", `{"name":"n","model":{"model":"m","retries":0}}`, "", ""},
		{"retries ten", `{"name":"n","model":{"model":"m","retries":10}}`, "", ""},
		{"retries eleven", `{"name":"n","model":{"model":"m","retries":11}}`, "model.retries", ">= 0 and <= 10 (got 11)"},
		{"retries negative", `{"name":"n","model":{"model":"m","retries":-1}}`, "model.retries", ">= 0 and <= 10 (got -1)"},
		{"maxTokens and effort", `{"name":"n","model":{"model":"m","maxTokens":8192,"reasoningEffort":"high"}}`, "", ""},
		{"maxTokens zero", `{"name":"n","model":{"model":"m","maxTokens":0}}`, "model.maxTokens", "integer >= 1"},
		{"unknown effort", `{"name":"n","model":{"model":"m","reasoningEffort":"extreme"}}`, "model.reasoningEffort", `unknown reasoning effort "extreme"`},
		{"no model", `{"name":"n","model":{"provider":"openai"}}`, "model.model", "is required"},
		{"scripted baseUrl", `{"name":"n","model":{"provider":"scripted","model":"m","baseUrl":"https://api.deepseek.com"}}`, "model.baseUrl", "must be empty"},
		{"relative baseUrl", `{"name":"n","model":{"provider":"openai","model":"m","baseUrl":"/v1"}}`, "model.baseUrl", "absolute http"},
		{"ftp baseUrl", `{"name":"n","model":{"provider":"openai","model":"m","baseUrl":"ftp://api.deepseek.com"}}`, "model.baseUrl", "absolute http"},
		{"disallowed host", `{"name":"n","model":{"provider":"openai","model":"m","baseUrl":"http://169.254.169.254/"}}`, "model.baseUrl", `host "169.254.169.254" is not allowed`},
		{"unknown mode", `{` + base + `,"tools":{"mode":"python"}}`, "tools.mode", `unknown mode "python"`},
		{"toolOrder without marker", `{` + base + `,"tools":{"toolOrder":["a","b"]}}`, "tools.toolOrder", "exactly once (found 0)"},
		{"toolOrder two markers", `{` + base + `,"tools":{"toolOrder":["<unlisted-tools>","a","<unlisted-tools>"]}}`, "tools.toolOrder", "exactly once (found 2)"},
		{"toolOrder duplicate", `{` + base + `,"tools":{"toolOrder":["a","<unlisted-tools>","a"]}}`, "tools.toolOrder[2]", `duplicate tool "a"`},
		{"toolOrder empty name", `{` + base + `,"tools":{"toolOrder":["","<unlisted-tools>"]}}`, "tools.toolOrder[0]", "must not be empty"},
		{"maxParallelToolCalls zero", `{` + base + `,"tools":{"maxParallelToolCalls":0}}`, "tools.maxParallelToolCalls", "integer >= 1"},
		{"maxParallelSubCalls negative", `{` + base + `,"tools":{"maxParallelSubCalls":-2}}`, "tools.maxParallelSubCalls", "integer >= 1"},
		{"empty allow entry", `{` + base + `,"tools":{"allow":[""]}}`, "tools.allow[0]", "must not be empty"},
		{"section without name", `{` + base + `,"prompt":{"sections":[{"order":1,"text":"x"}]}}`, "prompt.sections[0].name", "is required"},
		{"section duplicate", `{` + base + `,"prompt":{"sections":[{"name":"a","order":1},{"name":"a","order":2}]}}`, "prompt.sections[1].name", `duplicate section name "a"`},
		{"section without order", `{` + base + `,"prompt":{"sections":[{"name":"a","text":"x"}]}}`, "prompt.sections[0].order", "is required"},
		{"two complete sections", `{` + base + `,"prompt":{"sections":[{"name":"a","order":1,"complete":true},{"name":"b","order":2,"complete":true}]}}`, "prompt.sections", "at most one"},
		{"variable uppercase", `{` + base + `,"prompt":{"variables":{"Name":"x"}}}`, "prompt.variables", `"Name" must match`},
		{"variable digit first", `{` + base + `,"prompt":{"variables":{"1a":"x"}}}`, "prompt.variables", `"1a" must match`},
		{"variable dash", `{` + base + `,"prompt":{"variables":{"a-b":"x"}}}`, "prompt.variables", `"a-b" must match`},
		{"unknown policy", `{` + base + `,"approval":{"policy":"always"}}`, "approval.policy", `unknown policy "always"`},
		{"timeout zero", `{` + base + `,"approval":{"timeoutMs":0}}`, "approval.timeoutMs", "integer >= 1"},
		{"maxSteps zero", `{` + base + `,"limits":{"maxSteps":0}}`, "limits.maxSteps", "integer >= 1"},
	}
	rules := preset.Rules{ModelHosts: []string{"api.deepseek.com"}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := body(t, tc.json)
			err := rules.Validate(&b)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("valid body rejected: %v", err)
				}
				return
			}
			var ve *preset.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("err = %v; want a *ValidationError", err)
			}
			for _, p := range ve.Problems {
				if p.Field == tc.field && strings.Contains(p.Message, tc.msg) {
					return
				}
			}
			t.Fatalf("problems %+v; want %s: ...%s...", ve.Problems, tc.field, tc.msg)
		})
	}
}

func TestValidateNonFiniteOrder(t *testing.T) {
	t.Parallel()
	for _, order := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		b := body(t, `{"name":"n","model":{"provider":"scripted","model":"m"}}`)
		b.Prompt.Sections = []preset.Section{{Name: "a", Order: &order}}
		err := (preset.Rules{}).Validate(&b)
		if err == nil || !strings.Contains(err.Error(), "prompt.sections[0].order: must be a finite number") {
			t.Errorf("order %v: err = %v", order, err)
		}
	}
}

func TestValidateModelHosts(t *testing.T) {
	t.Parallel()
	js := `{"name":"n","model":{"provider":"openai","model":"m","baseUrl":"http://127.0.0.1:9000/v1"}}`
	for _, tc := range []struct {
		hosts []string
		ok    bool
	}{
		{nil, false},
		{[]string{"api.deepseek.com"}, false},
		{[]string{"127.0.0.1"}, false}, // a host without a port is the default port only
		{[]string{"127.0.0.1:9000"}, true},
		{[]string{"127.0.0.1:9001"}, false},
		{[]string{"*"}, true},
	} {
		b := body(t, js)
		err := preset.Rules{ModelHosts: tc.hosts}.Validate(&b)
		if (err == nil) != tc.ok {
			t.Errorf("hosts %v: err = %v; want ok=%v", tc.hosts, err, tc.ok)
		}
	}
}

// TestValidateModelBaseURLBypasses: write-time validation applies openai.AllowedBaseURL, the rule
// the agents apply at run time.
func TestValidateModelBaseURLBypasses(t *testing.T) {
	t.Parallel()
	rules := preset.Rules{ModelHosts: []string{"api.deepseek.com", "localhost", "[::1]:8080"}}
	for _, tc := range []struct {
		url string
		msg string // "" means valid
	}{
		{"https://api.deepseek.com/v1", ""},
		{"https://API.DEEPSEEK.COM/v1", ""},
		{"https://api.deepseek.com./v1", ""},
		{"https://api.deepseek.com:443/v1", ""},
		{"http://localhost/v1", ""},
		{"http://[::1]:8080/v1", ""},
		{"https://api.deepseek.com@evil.example/v1", "absolute http"},
		{"https://api.deepseek.com/v1?key=x", "absolute http"},
		{"https://api.deepseek.com/v1#x", "absolute http"},
		{"https://api.deepseek.com:8443/v1", `host "api.deepseek.com:8443" is not allowed`},
		{"http://localhost:8080/v1", `host "localhost:8080" is not allowed`},
		{"http://[::1]/v1", `host "[::1]" is not allowed`},
		{"http://[::1]:9090/v1", "is not allowed"},
	} {
		b := body(t, `{"name":"n","model":{"provider":"openai","model":"m"}}`)
		b.Model.BaseURL = tc.url
		err := rules.Validate(&b)
		if tc.msg == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.url, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: err = %v; want %q", tc.url, err, tc.msg)
		}
	}
}

func TestValidationErrorListsEveryProblem(t *testing.T) {
	t.Parallel()
	b := body(t, `{"model":{"provider":"x"},"tools":{"mode":"y"}}`)
	err := (preset.Rules{}).Validate(&b)
	var ve *preset.ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 4 {
		t.Fatalf("err = %v; want 4 problems (name, provider, model, mode)", err)
	}
	if !strings.HasPrefix(err.Error(), "invalid preset: name: is required; model.provider:") {
		t.Errorf("message = %q", err.Error())
	}
}

// TestValidateDefaultProvider: a preset that names no provider gets deepseek; one that names
// openai or scripted keeps it.
func TestValidateDefaultProvider(t *testing.T) {
	t.Parallel()
	for js, want := range map[string]string{
		`{"name":"n","model":{"model":"deepseek-chat"}}`:                       preset.ProviderDeepSeek,
		`{"name":"n","model":{"provider":"openai","model":"deepseek-chat"}}`:   preset.ProviderOpenAI,
		`{"name":"n","model":{"provider":"scripted","model":"default"}}`:       preset.ProviderScripted,
		`{"name":"n","model":{"provider":"deepseek","model":"deepseek-chat"}}`: preset.ProviderDeepSeek,
	} {
		b := body(t, js)
		if err := (preset.Rules{}).Validate(&b); err != nil || b.Model.Provider != want {
			t.Errorf("%s: provider %q (%v), want %q", js, b.Model.Provider, err, want)
		}
	}
}

// TestValidateBashNetwork: tools.bash.network defaults to false, may be turned on, and is refused
// when the operator forbids the sandbox network (Rules.SandboxNetworkDisabled).
func TestValidateBashNetwork(t *testing.T) {
	t.Parallel()
	b := body(t, `{"name":"n","model":{"provider":"scripted","model":"m"}}`)
	if err := (preset.Rules{}).Validate(&b); err != nil || b.Tools.Bash.Network == nil || *b.Tools.Bash.Network {
		t.Fatalf("default: %v %+v", err, b.Tools.Bash)
	}
	if out, _ := json.Marshal(b.Tools); !strings.Contains(string(out), `"bash":{"network":false}`) {
		t.Errorf("normalized tools %s", out)
	}
	on := `{"name":"n","model":{"provider":"scripted","model":"m"},"tools":{"bash":{"network":true}}}`
	b = body(t, on)
	if err := (preset.Rules{}).Validate(&b); err != nil || !*b.Tools.Bash.Network {
		t.Fatalf("on: %v %+v", err, b.Tools.Bash)
	}
	b = body(t, on)
	err := preset.Rules{SandboxNetworkDisabled: true}.Validate(&b)
	var ve *preset.ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Field != "tools.bash.network" ||
		!strings.Contains(ve.Problems[0].Message, "DSHD_SANDBOX_NETWORK=0") {
		t.Fatalf("forbidden: %v", err)
	}
	b = body(t, `{"name":"n","model":{"provider":"scripted","model":"m"},"tools":{"bash":{"network":false}}}`)
	if err := (preset.Rules{SandboxNetworkDisabled: true}).Validate(&b); err != nil {
		t.Fatalf("off while forbidden: %v", err)
	}
}
