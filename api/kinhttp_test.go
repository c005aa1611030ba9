package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/contracttest"
)

// Every exchange of the harness with a replica (replica.do and every other request function of
// these tests, which send through harnessClient) is validated against openapi.yaml by
// internal/contracttest; a mismatch comes back from the client as an error, which the request
// functions fail the test with.

// harnessClient is http.DefaultClient with the contract's validation of exchanges with replicas.
var harnessClient = &http.Client{Transport: contracttest.Transport(http.DefaultTransport)}

// kinServe has the exchanges with the server at raw (an httptest server's URL) validated until
// the test ends.
func kinServe(t testing.TB, raw string) { contracttest.Serve(t, raw) }

// TestKinValidationFails: the validation of harnessClient fails on what the contract does not
// allow, shown by a server that answers each request as told.
func TestKinValidationFails(t *testing.T) {
	t.Parallel()
	answers := map[string]struct {
		status int
		ct     string
		body   string
	}{
		"GET /healthz":                    {200, "application/json", `{"status":1}`},
		"GET /readyz":                     {418, "application/problem+json", `{"type":"t","title":"t","status":418,"code":"internal","detail":"d"}`},
		"GET /v1/nope":                    {200, "application/json", `{}`},
		"GET /v1/other":                   {404, "text/plain", `nope`},
		"POST /v1/presets":                {201, "application/json", `{}`},
		"GET /v1/sessions/{id}/stream":    {200, "text/plain", ``},
		"GET /metrics":                    {401, "application/json", `{}`},
		"GET /v1/sessions/{id}/events/ok": {200, "text/event-stream", ``},
	}
	sid := "6f1c1d0e-7b9a-4c47-9a57-1f0c2a3b4c5d"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Method + " " + strings.ReplaceAll(r.URL.Path, sid, "{id}")
		a, ok := answers[key]
		switch {
		case key == "GET /v1/sessions/{id}/events/stream":
			a = answers["GET /v1/sessions/{id}/stream"]
		case key == "GET /v1/sessions/{id}/events":
			a = answers["GET /v1/sessions/{id}/events/ok"]
		case !ok:
			a = answers["GET /v1/other"]
		}
		w.Header().Set("Content-Type", a.ct)
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
	}))
	t.Cleanup(srv.Close)
	contracttest.ServeFailing(t, srv.URL) // it answers against the contract on purpose
	for _, tc := range []struct {
		method, path, body string
		fails              bool
	}{
		{"GET", "/healthz", "", true},                               // a body that is not the schema
		{"GET", "/readyz", "", true},                                // an undocumented status
		{"GET", "/v1/nope", "", true},                               // no operation, yet no 404
		{"GET", "/v1/unknown", "", true},                            // a 404 that is no problem document
		{"POST", "/v1/presets", `{"name":1}`, true},                 // an invalid request accepted
		{"GET", "/v1/sessions/" + sid + "/events/stream", "", true}, // a stream of another content type
		{"GET", "/metrics", "", true},                               // a problem status with a JSON body
		{"DELETE", "/v1/presets/" + sid, "", true},                  // a body where none is documented
		{"GET", "/v1/sessions/" + sid + "/events", "", false},       // the stream alias: not read
	} {
		var body io.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
		}
		req, err := http.NewRequest(tc.method, srv.URL+tc.path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "text/event-stream")
		if tc.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := harnessClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		if (err != nil) != tc.fails {
			t.Errorf("%s %s: error %v, want one: %v", tc.method, tc.path, err, tc.fails)
		}
	}
}
