package api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// Every exchange of the harness with a replica (replica.do and every other request function of
// these tests, which send through harnessClient) is validated against openapi.yaml by
// kin-openapi: the request, unless the server refused it (a test about a bad request sends one
// on purpose; a 2xx answer to a request the contract does not allow fails), and always the
// response: its status must be documented, its headers and content type too, and its body must
// match the schema (a stream's body is not read: its frames are checked by the stream tests).
// A mismatch comes back from the client as an error naming the method, path, status and kin's
// error, which the request functions fail the test with.

// harnessClient is http.DefaultClient with kin-openapi validation of exchanges with replicas.
var harnessClient = &http.Client{Transport: kinTransport{base: http.DefaultTransport}}

// kinHosts are the host:port of the replicas of this test binary; requests to anything else (the
// scripted model, webhook receivers) are not the API's and pass unvalidated.
var kinHosts sync.Map

// kinServe has the exchanges with the server at raw (an httptest server's URL) validated until
// the test ends.
func kinServe(t testing.TB, raw string) {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	kinHosts.Store(u.Host, true)
	t.Cleanup(func() { kinHosts.Delete(u.Host) })
}

func init() {
	// kin-openapi checks date and date-time itself; openapi.yaml's uuid is any RFC 9562 UUID in
	// its hyphenated form, as the server writes them.
	openapi3.DefineStringFormatValidator("uuid", openapi3.NewRegexpFormatValidator(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`))
	// The contract gives the text bodies (the document, the page, metrics, a JSON Lines export or
	// import) the schema {type: string}: the body is the string. kin-openapi would parse YAML
	// and has no decoder for the others.
	for _, ct := range []string{"application/yaml", "text/html", "application/x-ndjson", "application/jsonl", "application/x-jsonlines"} {
		openapi3filter.RegisterBodyDecoder(ct, openapi3filter.PlainBodyDecoder)
	}
}

// kinRouter finds the operation of a request in openapi.yaml.
var kinRouter = sync.OnceValues(func() (routers.Router, error) {
	doc, err := kinDoc()
	if err != nil {
		return nil, err
	}
	return legacy.NewRouter(doc)
})

// kinTransport validates the exchanges with the replicas in kinHosts.
type kinTransport struct{ base http.RoundTripper }

func (k kinTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if _, ok := kinHosts.Load(req.URL.Host); !ok {
		return k.base.RoundTrip(req)
	}
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		var err error
		body, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := k.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if err := kinExchange(req, body, resp); err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("openapi.yaml (kin-openapi): %s %s answered %d: %w", req.Method, req.URL.RequestURI(), resp.StatusCode, err)
	}
	return resp, nil
}

// kinExchange validates the request req with body and its response resp, whose body it replaces
// with a copy (a stream's body it leaves unread).
func kinExchange(req *http.Request, body []byte, resp *http.Response) error {
	router, err := kinRouter()
	if err != nil {
		return err
	}
	vr := req.Clone(context.Background())
	vr.Body = io.NopCloser(bytes.NewReader(body))
	// openapi.yaml's server is "/", the server that serves it: the operation is found by path.
	vr.URL = &url.URL{Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var data []byte
	if ct != "text/event-stream" {
		if data, err = io.ReadAll(resp.Body); err != nil {
			return err
		}
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(data))
	}
	route, params, err := router.FindRoute(vr)
	if err != nil {
		// No operation: the server must say so with a problem document (an unknown route or
		// method is a 404 or 405).
		if err.Error() != routers.ErrPathNotFound.Error() && err.Error() != routers.ErrMethodNotAllowed.Error() {
			return err
		}
		if req.Method == http.MethodOptions && req.Header.Get("Access-Control-Request-Method") != "" {
			// A CORS preflight is answered before routing, as the description of openapi.yaml
			// says; OpenAPI has no operation for it.
			return nil
		}
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			return fmt.Errorf("no operation of openapi.yaml (%v), yet not a 404 or 405", err)
		}
		return kinProblem(ct, data)
	}
	in := &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}}
	if resp.StatusCode/100 == 2 && req.Context().Value(kinLenientKey{}) == nil {
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			return fmt.Errorf("the server accepted a request openapi.yaml does not allow: %w", err)
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode,
		Header: resp.Header, Body: io.NopCloser(bytes.NewReader(data)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: ct == "text/event-stream"}}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		return err
	}
	documented := route.Operation.Responses.Status(resp.StatusCode)
	if documented == nil || documented.Value == nil {
		return nil // 304 and the redirects, which kin-openapi does not check
	}
	content := documented.Value.Content
	switch {
	case len(content) == 0 && len(data) > 0:
		return fmt.Errorf("documented without content, yet answered %q", data)
	case len(content) > 0 && ct == "text/event-stream" && content.Get(ct) == nil:
		return fmt.Errorf("content type %s is not documented", ct)
	}
	return nil
}

// kinProblem validates an answer of no operation: a problem document.
func kinProblem(ct string, data []byte) error {
	if ct != "application/problem+json" {
		return fmt.Errorf("content type %q, want application/problem+json", ct)
	}
	var v any
	if err := jsonDecode(string(data), &v); err != nil {
		return err
	}
	return kinSchema("Problem", v)
}

// kinLenientKey on a request's context skips the validation of the request even when the server
// accepts it: the test is about the server accepting what the contract does not promise.
type kinLenientKey struct{}

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
	kinServe(t, srv.URL)
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
