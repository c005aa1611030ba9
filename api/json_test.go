package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestStrictJSONBodies: a body with a duplicate key, invalid UTF-8 or a lone
// surrogate escape answers 400 saying what is wrong, and a body sent as something other than JSON
// answers 415 unsupported_media_type, on every endpoint that takes a body. A body without a
// Content-Type is still read as JSON.
func TestStrictJSONBodies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionCreate(t, e.keyA)
	msgs := "/v1/sessions/" + sid.String() + "/messages"
	for _, tc := range []struct {
		name, method, path, key, body string
		contentType                   string
		status                        int
		code, detail                  string
	}{
		{"duplicate key", "POST", "/v1/presets", e.keyA, `{"name":"a","name":"b","model":{"provider":"scripted","model":"m"}}`, "application/json", 400, "invalid_request", `duplicate key "name"`},
		{"nested duplicate key", "POST", "/v1/presets", e.keyA, `{"name":"a","model":{"provider":"scripted","model":"m","model":"n"}}`, "application/json", 400, "invalid_request", `duplicate key "model" in model`},
		{"duplicate key in an array", "POST", "/v1/presets", e.keyA, `{"name":"a","model":{"provider":"scripted","model":"m"},"prompt":{"sections":[{"name":"s","order":1},{"name":"t","order":2,"order":3}]}}`, "", 400, "invalid_request", `duplicate key "order" in prompt.sections[1]`},
		{"duplicate session key", "POST", "/v1/sessions", e.keyA, `{"presetId":"6f1c1d0e-7b9a-4c47-9a57-1f0c2a3b4c5d","presetId":"6f1c1d0e-7b9a-4c47-9a57-1f0c2a3b4c5d"}`, "application/json", 400, "invalid_request", `duplicate key "presetId"`},
		{"duplicate message key", "POST", msgs, e.keyA, `{"content":"a","content":"b"}`, "application/json", 400, "invalid_request", `duplicate key "content"`},
		{"duplicate tenant key", "POST", "/v1/tenants", adminToken, `{"name":"a","name":"b"}`, "application/json", 400, "invalid_request", `duplicate key "name"`},
		{"invalid UTF-8", "POST", "/v1/presets", e.keyA, "{\"name\":\"a\xff\",\"model\":{\"provider\":\"scripted\",\"model\":\"m\"}}", "application/json", 400, "invalid_request", "not valid UTF-8"},
		{"invalid UTF-8 in a key", "POST", msgs, e.keyA, "{\"content\":\"x\",\"\xc3\x28\":1}", "application/json", 400, "invalid_request", "not valid UTF-8"},
		{"lone surrogate", "POST", msgs, e.keyA, `{"content":"x\ud800y"}`, "application/json", 400, "invalid_request", "surrogate"},
		{"lone low surrogate", "POST", "/v1/tenants", adminToken, `{"name":"\udc00"}`, "application/json", 400, "invalid_request", "surrogate"},
		{"form body", "POST", "/v1/presets", e.keyA, minimalPreset, "application/x-www-form-urlencoded", 415, "unsupported_media_type", "application/json"},
		{"text body", "POST", msgs, e.keyA, `{"content":"x"}`, "text/plain", 415, "unsupported_media_type", "text/plain"},
		{"other charset", "POST", "/v1/sessions", e.keyA, `{}`, "application/json; charset=latin1", 415, "unsupported_media_type", "charset"},
		{"malformed content type", "PUT", "/v1/presets/6f1c1d0e-7b9a-4c47-9a57-1f0c2a3b4c5d", e.keyA, minimalPreset, "application/", 415, "unsupported_media_type", "Content-Type"},
		{"cancel body", "POST", "/v1/sessions/" + sid.String() + "/cancel", e.keyA, `{}`, "multipart/form-data; boundary=x", 415, "unsupported_media_type", "application/json"},
		{"tenant body", "POST", "/v1/tenants", adminToken, `{"name":"x"}`, "text/json", 415, "unsupported_media_type", "application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(t, tc.method, tc.path, tc.key, tc.body, "Content-Type", tc.contentType)
			if tc.contentType == "" {
				r = e.doNoType(t, tc.method, tc.path, tc.key, tc.body)
			}
			p := r.wantProblem(t, tc.status, tc.code)
			if !strings.Contains(p.Detail, tc.detail) {
				t.Errorf("detail %q does not contain %q", p.Detail, tc.detail)
			}
		})
	}
	// What stays accepted: JSON with parameters, a structured +json type, no Content-Type at all,
	// escaped surrogate pairs, the same key in sibling objects.
	e.do(t, "POST", "/v1/presets", e.keyA, minimalPreset, "Content-Type", "application/json; charset=UTF-8").want(t, http.StatusCreated)
	e.doLenient(t, "POST", "/v1/presets", e.keyA, minimalPreset, "Content-Type", "application/vnd.dshd+json").want(t, http.StatusCreated)
	e.doNoType(t, "POST", "/v1/presets", e.keyA, minimalPreset).want(t, http.StatusCreated)
	e.do(t, "POST", msgs, e.keyA, `{"content":"smile \ud83d\ude00 \\ud800"}`).want(t, http.StatusAccepted)
	e.do(t, "POST", "/v1/presets", e.keyA, `{"name":"p","model":{"provider":"scripted","model":"m"},"prompt":{"sections":[{"name":"a","order":1},{"name":"b","order":2}]}}`).want(t, http.StatusCreated)
	e.do(t, "POST", "/v1/sessions/"+sid.String()+"/cancel", e.keyA, nil, "Content-Type", "text/plain").want(t, http.StatusOK)
}
