package preset_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/policy"
	"github.com/dshd/dshd/pkg/preset"
)

// withPolicies returns a minimal body with the policies block given as JSON.
func withPolicies(t *testing.T, block string) preset.Body {
	t.Helper()
	b := minimal()
	if err := json.Unmarshal([]byte(block), &b.Policies); err != nil {
		t.Fatal(err)
	}
	return b
}

var webhookRules = preset.Rules{ModelHosts: []string{"*"}, PolicyWebhookKey: []byte("k")}

func validate(t *testing.T, r preset.Rules, b preset.Body) *preset.ValidationError {
	t.Helper()
	ve, _ := r.Validate(&b).(*preset.ValidationError)
	return ve
}

func TestPoliciesDefaultsAndValidBlock(t *testing.T) {
	t.Parallel()
	b := minimal()
	if ve := validate(t, webhookRules, b); ve != nil {
		t.Fatal(ve)
	}
	b.Normalize()
	got, _ := json.Marshal(b.Policies)
	if string(got) != `{"preExecute":[],"guards":[],"postExecute":[],"webhooks":{"timeoutMs":2000}}` {
		t.Fatalf("defaults %s", got)
	}
	b = withPolicies(t, `{"preExecute":[{"tools":["bash"],"match":{"command":"^rm "},"decision":"deny","reason":"no rm"},
		{"tools":["*"],"decision":"ask"},{"tools":["read"],"decision":"allow"}],
		"guards":[{"tools":["write"],"match":{"path":"^/etc/"},"reason":"read-only"}],
		"postExecute":[{"tools":["*"],"action":"addContext","context":"c"},{"tools":["bash"],"action":"block","feedback":"f"},
		{"tools":["read"],"match":{"path":"secret"},"action":"replace","content":"x"}],
		"webhooks":{"preExecute":"https://hooks.example.com/pre","postExecute":"https://hooks.example.com/post","timeoutMs":500}}`)
	if ve := validate(t, webhookRules, b); ve != nil {
		t.Fatal(ve)
	}
}

// TestPoliciesRefusedWithClearMessages: unknown decisions and actions, a missing or misplaced
// text, bad regexps and webhook URLs are refused at create and update, each with its field.
func TestPoliciesRefusedWithClearMessages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		block, field, msg string
		rules             *preset.Rules
	}{
		{`{"preExecute":[{"tools":["a"],"decision":"maybe"}]}`, "policies.preExecute[0].decision", `unknown decision "maybe" (want "allow", "deny" or "ask")`, nil},
		{`{"preExecute":[{"tools":["a"]}]}`, "policies.preExecute[0].decision", "is required", nil},
		{`{"preExecute":[{"decision":"deny"}]}`, "policies.preExecute[0].tools", `is required: name the tools, or ["*"] for all`, nil},
		{`{"preExecute":[{"tools":["*","a"],"decision":"deny"}]}`, "policies.preExecute[0].tools", `"*" must be the only entry`, nil},
		{`{"preExecute":[{"tools":[""],"decision":"deny"}]}`, "policies.preExecute[0].tools[0]", "must not be empty", nil},
		{`{"preExecute":[{"tools":["a"],"decision":"allow","reason":"r"}]}`, "policies.preExecute[0].reason", `only for the decisions "deny" and "ask"`, nil},
		{`{"preExecute":[{"tools":["a"],"match":{"command":"(rm"},"decision":"deny"}]}`, "policies.preExecute[0].match.command", "invalid regexp: missing closing ): `(rm`", nil},
		{`{"guards":[{"tools":["a"],"match":{"x":"a{2000}"}}]}`, "policies.guards[0].match.x", "invalid regexp: invalid repeat count", nil},
		{`{"guards":[{"tools":["a"],"match":{"":"x"}}]}`, "policies.guards[0].match", "an argument name must not be empty", nil},
		{`{"postExecute":[{"tools":["a"],"action":"shred"}]}`, "policies.postExecute[0].action", `unknown action "shred" (want "block", "replace" or "addContext")`, nil},
		{`{"postExecute":[{"tools":["a"]}]}`, "policies.postExecute[0].action", "is required", nil},
		{`{"postExecute":[{"tools":["a"],"action":"block"}]}`, "policies.postExecute[0].feedback", `is required by action "block"`, nil},
		{`{"postExecute":[{"tools":["a"],"action":"replace","content":"x","feedback":"y"}]}`, "policies.postExecute[0].feedback", `is only for action "block"`, nil},
		{`{"postExecute":[{"tools":["a"],"action":"addContext"}]}`, "policies.postExecute[0].context", `is required by action "addContext"`, nil},
		{`{"webhooks":{"preExecute":"https://h.example.com/"}}`, "policies.webhooks.preExecute", "policy webhooks are disabled on this server", &preset.Rules{ModelHosts: []string{"*"}}},
		{`{"webhooks":{"preExecute":"http://h.example.com/"}}`, "policies.webhooks.preExecute", "must be an https URL (this server allows no http webhooks)", nil},
		{`{"webhooks":{"postExecute":"ftp://h.example.com/"}}`, "policies.webhooks.postExecute", `must be an https URL (got scheme "ftp")`, nil},
		{`{"webhooks":{"postExecute":"/relative"}}`, "policies.webhooks.postExecute", "must be an absolute https URL", nil},
		{`{"webhooks":{"postExecute":"https://u:p@h.example.com/"}}`, "policies.webhooks.postExecute", "must have no credentials and no fragment", nil},
		{`{"webhooks":{"postExecute":"https://169.254.169.254/latest"}}`, "policies.webhooks.postExecute", `host "169.254.169.254" is not a public address`, nil},
		{`{"webhooks":{"postExecute":"https://[::1]:8443/"}}`, "policies.webhooks.postExecute", `host "::1" is not a public address`, nil},
		{`{"webhooks":{"postExecute":"https://localhost/"}}`, "policies.webhooks.postExecute", `host "localhost" is a loopback name`, nil},
		{`{"webhooks":{"timeoutMs":0}}`, "policies.webhooks.timeoutMs", "must be an integer >= 1 and <= 30000 (got 0)", nil},
	} {
		r := webhookRules
		if tc.rules != nil {
			r = *tc.rules
		}
		ve := validate(t, r, withPolicies(t, tc.block))
		if !hasProblem(ve, tc.field, tc.msg) {
			t.Errorf("%s: problems %v; want %s: %s", tc.block, ve, tc.field, tc.msg)
		}
	}
	// The operator settings of tests allow http and private hosts.
	r := webhookRules
	r.PolicyWebhookHTTP, r.PolicyWebhookPrivate = true, true
	if ve := validate(t, r, withPolicies(t, `{"webhooks":{"preExecute":"http://127.0.0.1:9000/hook"}}`)); ve != nil {
		t.Fatal(ve)
	}
}

// TestPoliciesLimits: the documented limits of the block are enforced at their bounds.
func TestPoliciesLimits(t *testing.T) {
	t.Parallel()
	rules := func(n int, rule string) string {
		return "[" + strings.TrimSuffix(strings.Repeat(rule+",", n), ",") + "]"
	}
	deny := `{"tools":["a"],"decision":"deny"}`
	for _, tc := range []struct {
		ok, over, field, msg string
	}{
		{`{"preExecute":` + rules(policy.MaxRules, deny) + `}`, `{"preExecute":` + rules(policy.MaxRules+1, deny) + `}`,
			"policies.preExecute", fmt.Sprintf("at most %d rules (got %d)", policy.MaxRules, policy.MaxRules+1)},
		{`{"guards":` + rules(policy.MaxRules, `{"tools":["a"]}`) + `}`, `{"guards":` + rules(policy.MaxRules+1, `{"tools":["a"]}`) + `}`,
			"policies.guards", "at most 64 rules"},
		{fmt.Sprintf(`{"guards":[{"tools":["a"],"match":{"x":%q}}]}`, strings.Repeat("a", policy.MaxPatternBytes)),
			fmt.Sprintf(`{"guards":[{"tools":["a"],"match":{"x":%q}}]}`, strings.Repeat("a", policy.MaxPatternBytes+1)),
			"policies.guards[0].match.x", "the regexp must be at most 1024 bytes (got 1025)"},
		{fmt.Sprintf(`{"guards":[{"tools":["a"],"reason":%q}]}`, strings.Repeat("r", policy.MaxReasonBytes)),
			fmt.Sprintf(`{"guards":[{"tools":["a"],"reason":%q}]}`, strings.Repeat("r", policy.MaxReasonBytes+1)),
			"policies.guards[0].reason", "must be at most 1024 bytes (got 1025)"},
		{fmt.Sprintf(`{"postExecute":[{"tools":["a"],"action":"block","feedback":%q}]}`, strings.Repeat("f", policy.MaxTextBytes)),
			fmt.Sprintf(`{"postExecute":[{"tools":["a"],"action":"block","feedback":%q}]}`, strings.Repeat("f", policy.MaxTextBytes+1)),
			"policies.postExecute[0].feedback", "must be at most 32768 bytes"},
		{fmt.Sprintf(`{"postExecute":%s}`, rules(2, fmt.Sprintf(`{"tools":["a"],"action":"block","feedback":%q}`, strings.Repeat("f", policy.MaxPoliciesBytes/2)))),
			fmt.Sprintf(`{"postExecute":%s}`, rules(3, fmt.Sprintf(`{"tools":["a"],"action":"block","feedback":%q}`, strings.Repeat("f", policy.MaxPoliciesBytes/2)))),
			"policies", "must be at most 65536 bytes together"},
		{`{"webhooks":{"timeoutMs":30000}}`, `{"webhooks":{"timeoutMs":30001}}`, "policies.webhooks.timeoutMs", "<= 30000 (got 30001)"},
	} {
		if ve := validate(t, webhookRules, withPolicies(t, tc.ok)); ve != nil && hasProblem(ve, tc.field, "") {
			t.Errorf("%s at its limit: %v", tc.field, ve)
		}
		if ve := validate(t, webhookRules, withPolicies(t, tc.over)); !hasProblem(ve, tc.field, tc.msg) {
			t.Errorf("%s over its limit: %v", tc.field, ve)
		}
	}
	// 16 match arguments; more are refused.
	match := map[string]string{}
	for i := range policy.MaxMatchArgs + 1 {
		match[fmt.Sprintf("a%d", i)] = "x"
	}
	b := minimal()
	b.Policies.Guards = []policy.GuardRule{{Tools: []string{"a"}, Match: match}}
	if ve := validate(t, webhookRules, b); !hasProblem(ve, "policies.guards[0].match", "at most 16 arguments (got 17)") {
		t.Errorf("match: %v", ve)
	}
}
