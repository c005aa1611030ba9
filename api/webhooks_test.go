package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/policy"
)

// testWebhookKey is the policy webhook key of the test servers (harness_test.go).
var testWebhookKey = []byte("the policy webhook key of the api tests")

// TestPresetPoliciesOverHTTP: a preset's policies are stored with their defaults and returned;
// an invalid block answers 400 with the field; the preset's webhook secret is the one derived
// from the server's key and the preset id, the same after an update, and only for its tenant.
func TestPresetPoliciesOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := `{"name":"p","model":{"provider":"scripted","model":"m"},"policies":{
		"preExecute":[{"tools":["bash"],"match":{"command":"^rm "},"decision":"deny","reason":"no rm"}],
		"guards":[{"tools":["*"],"match":{"path":"^/etc/"},"reason":"read-only"}],
		"postExecute":[{"tools":["read"],"action":"block","feedback":"withheld"}],
		"webhooks":{"preExecute":"https://hooks.example.com/pre"}}}`
	var p struct {
		ID       string
		Policies policy.Policies
	}
	e.do(t, "POST", "/v1/presets", e.keyA, body).want(t, http.StatusCreated).json(t, &p)
	if len(p.Policies.PreExecute) != 1 || p.Policies.PreExecute[0].Match["command"] != "^rm " ||
		p.Policies.Guards[0].Reason != "read-only" || p.Policies.PostExecute[0].Feedback != "withheld" ||
		*p.Policies.Webhooks.TimeoutMs != policy.DefaultWebhookTimeoutMs {
		t.Fatalf("policies %+v", p.Policies)
	}
	for _, tc := range []struct{ block, detail string }{
		{`{"preExecute":[{"tools":["a"],"decision":"perhaps"}]}`, `policies.preExecute[0].decision: unknown decision "perhaps"`},
		{`{"postExecute":[{"tools":["a"],"action":"shred"}]}`, `policies.postExecute[0].action: unknown action "shred"`},
		{`{"guards":[{"tools":["a"],"match":{"x":"("}}]}`, "policies.guards[0].match.x: invalid regexp"},
		{`{"guards":[{"tools":["a"],"reason":"r","extra":1}]}`, "extra"},
		{`{"webhooks":{"preExecute":"http://hooks.example.com/"}}`, "must be an https URL"},
	} {
		b := `{"name":"p","model":{"provider":"scripted","model":"m"},"policies":` + tc.block + `}`
		prob := e.do(t, "POST", "/v1/presets", e.keyA, b).wantProblem(t, http.StatusBadRequest, "invalid_request")
		if !strings.Contains(prob.Detail, tc.detail) {
			t.Errorf("%s: detail %q does not contain %q", tc.block, prob.Detail, tc.detail)
		}
	}

	var s struct{ Secret, SignatureHeader string }
	url := "/v1/presets/" + p.ID + "/webhook-secret"
	e.do(t, "GET", url, e.keyA, nil).want(t, http.StatusOK).json(t, &s)
	if s.Secret != policy.Secret(testWebhookKey, uuidOf(t, p.ID)) || s.SignatureHeader != policy.HeaderSignature {
		t.Fatalf("secret %+v", s)
	}
	e.do(t, "PUT", "/v1/presets/"+p.ID, e.keyA, body).want(t, http.StatusOK)
	var again struct{ Secret string }
	e.do(t, "GET", url, e.keyA, nil).want(t, http.StatusOK).json(t, &again)
	if again.Secret != s.Secret {
		t.Fatal("the secret changed with the version")
	}
	e.do(t, "GET", url, e.keyB, nil).wantProblem(t, http.StatusNotFound, "not_found")
}
