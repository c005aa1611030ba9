// Package contracttest checks HTTP exchanges with dshd against openapi.yaml, with
// github.com/getkin/kin-openapi (a complete OpenAPI 3.1 and JSON Schema 2020-12 implementation).
// The tests of api send their requests through Transport, so every exchange with a dshd server
// is validated; internal/e2e's go through SampledTransport, which validates the first exchanges
// of each operation and status. A validated exchange is checked whole: the request, unless the server refused it (a test about a
// bad request sends one on purpose; a 2xx answer to a request the contract does not allow
// fails), and always the response: its status must be documented, its headers and content type
// too, and its body must match the schema (a stream's body is not read: its frames are checked
// by the stream tests, and Schema checks events one by one). A mismatch comes back from the
// round trip as an error naming the method, path, status and kin's error.
//
// It is test infrastructure: only tests import it.
package contracttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/dshd/dshd"
)

// Doc is openapi.yaml as kin-openapi reads it, loaded and validated once per test binary.
var Doc = sync.OnceValues(func() (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(dshd.OpenAPI)
	if err != nil {
		return nil, err
	}
	return doc, doc.Validate(context.Background())
})

// Schema validates v, a decoded JSON value, against the component schema name.
func Schema(name string, v any) error {
	doc, err := Doc()
	if err != nil {
		return err
	}
	s := doc.Components.Schemas[name]
	if s == nil || s.Value == nil {
		return fmt.Errorf("kin-openapi: no schema %s", name)
	}
	return s.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.MultiErrors())
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

// hosts are the dshd servers of this test binary by host:port; requests to anything else (the
// scripted model, webhook receivers, proxies the tests put in front) pass unvalidated. Each
// counts the tests serving it (a port a stopped server freed may serve another test's server
// before the first test's cleanup runs) and keeps the mismatches found, which the test's cleanup
// reports: a client may retry a failed exchange and never show its error.
var (
	hostsMu sync.Mutex
	hosts   = map[string]*host{}
)

type host struct {
	tests      int
	mismatches []string
}

func served(h string) bool {
	hostsMu.Lock()
	defer hostsMu.Unlock()
	return hosts[h] != nil
}

func mismatch(h string, err error) {
	hostsMu.Lock()
	defer hostsMu.Unlock()
	if s := hosts[h]; s != nil && len(s.mismatches) < 20 {
		s.mismatches = append(s.mismatches, err.Error())
	}
}

// Serve has the exchanges with the server at raw (its base URL) validated until the test ends,
// when the test fails with every mismatch found (besides the error its round trip returned).
func Serve(t testing.TB, raw string) { serve(t, raw, true) }

// ServeFailing is Serve for a server that answers against the contract on purpose: the
// mismatches are the round trips' errors only.
func ServeFailing(t testing.TB, raw string) { serve(t, raw, false) }

func serve(t testing.TB, raw string, report bool) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	hostsMu.Lock()
	if hosts[u.Host] == nil {
		hosts[u.Host] = &host{}
	}
	hosts[u.Host].tests++
	hostsMu.Unlock()
	t.Cleanup(func() {
		hostsMu.Lock()
		s := hosts[u.Host]
		found := s.mismatches
		s.mismatches = nil
		if s.tests--; s.tests <= 0 {
			delete(hosts, u.Host)
		}
		hostsMu.Unlock()
		if report {
			for _, m := range found {
				t.Errorf("an exchange with %s did not match openapi.yaml: %s", u.Host, m)
			}
		}
	})
}

type lenientKey struct{}

// Lenient marks a request's context so that its request is not validated even when the server
// accepts it (its response still is): for tests about the server accepting what the contract
// does not promise.
func Lenient(ctx context.Context) context.Context { return context.WithValue(ctx, lenientKey{}, true) }

// Transport validates the exchanges through base with the servers given to Serve.
func Transport(base http.RoundTripper) http.RoundTripper { return &transport{base: base} }

// SampledTransport is Transport validating only the first perOperation exchanges of each
// operation and status (and every exchange no operation answers). kin-openapi compiles the
// schema of every response it checks (an event page's takes about 20 ms of CPU), which tests
// that poll a log many times a second cannot afford on two cores; the operations and statuses
// they reach are all checked, as every exchange of the api package's tests is.
func SampledTransport(base http.RoundTripper, perOperation int64) http.RoundTripper {
	return &transport{base: base, perOperation: perOperation}
}

type transport struct {
	base         http.RoundTripper
	perOperation int64    // 0: every exchange
	seen         sync.Map // operationId and status: *atomic.Int64, with perOperation
}

// sampledOut reports whether the exchange's operation and status were validated perOperation
// times already.
func (k *transport) sampledOut(req *http.Request, status int) bool {
	if k.perOperation <= 0 {
		return false
	}
	r, err := router()
	if err != nil {
		return false
	}
	vr := req.Clone(context.Background())
	vr.URL = &url.URL{Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
	route, _, err := r.FindRoute(vr)
	if err != nil {
		return false
	}
	n, _ := k.seen.LoadOrStore(route.Operation.OperationID+" "+strconv.Itoa(status), new(atomic.Int64))
	return n.(*atomic.Int64).Add(1) > k.perOperation
}

func (k *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !served(req.URL.Host) {
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
	if err != nil || k.sampledOut(req, resp.StatusCode) {
		return resp, err
	}
	if err := exchange(req, body, resp); err != nil {
		resp.Body.Close()
		err = fmt.Errorf("openapi.yaml (kin-openapi): %s %s answered %d: %w", req.Method, req.URL.Path, resp.StatusCode, err)
		mismatch(req.URL.Host, err)
		return nil, err
	}
	return resp, nil
}

// router finds the operation of a request in openapi.yaml.
var router = sync.OnceValues(func() (routers.Router, error) {
	doc, err := Doc()
	if err != nil {
		return nil, err
	}
	return legacy.NewRouter(doc)
})

// exchange validates the request req with body and its response resp, whose body it replaces
// with a copy (a stream's body it leaves unread).
func exchange(req *http.Request, body []byte, resp *http.Response) error {
	router, err := router()
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
		return problem(ct, data)
	}
	in := &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}}
	if resp.StatusCode/100 == 2 && req.Context().Value(lenientKey{}) == nil {
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

// problem validates an answer of no operation: a problem document.
func problem(ct string, data []byte) error {
	if ct != "application/problem+json" {
		return fmt.Errorf("content type %q, want application/problem+json", ct)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	return Schema("Problem", v)
}
