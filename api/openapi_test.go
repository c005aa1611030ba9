package api_test

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/uuid"
	"go.yaml.in/yaml/v4"

	"github.com/dshd/dshd"
	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

// contract remembers which operations and statuses the responses it is shown answered. Every
// response of the harness is validated against openapi.yaml by kin-openapi as it arrives
// (kinhttp_test.go); check also makes sure the response is one of the operation named.
type contract struct {
	t      *testing.T
	spec   map[string]any
	tested map[string]bool // "METHOD path status"
}

func loadContract(t *testing.T) *contract {
	var spec map[string]any
	if err := yaml.Unmarshal(dshd.OpenAPI, &spec); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	return &contract{t: t, spec: spec, tested: map[string]bool{}}
}

// check fails the test unless operation method path (the spec's path template) documents r's
// status, and records it as exercised.
func (c *contract) check(method, path string, r response) response {
	t := c.t
	t.Helper()
	doc, err := kinDoc()
	if err != nil {
		t.Fatalf("kin-openapi: %v", err)
	}
	var op *openapi3.Operation
	if item := doc.Paths.Value(path); item != nil {
		op = item.GetOperation(method)
	}
	if op == nil {
		t.Fatalf("openapi.yaml has no %s %s", method, path)
	}
	if resp := op.Responses.Status(r.status); resp == nil || resp.Value == nil {
		t.Fatalf("openapi.yaml: %s %s does not document status %d (body %s)", method, path, r.status, r.body)
	}
	c.tested[method+" "+path+" "+strconv.Itoa(r.status)] = true
	return r
}

// TestOpenAPIDescribesResponses exercises every endpoint and validates each response against
// openapi.yaml; every route must be documented and every documented operation exercised.
func TestOpenAPIDescribesResponses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.MaxBodyBytes = 4096; c.MaxStreamsPerSession = 1 })
	c := loadContract(t)
	big := `{"name":"` + strings.Repeat("x", 5000) + `"}`

	c.check("GET", "/healthz", e.do(t, "GET", "/healthz", "", nil))
	c.check("GET", "/readyz", e.do(t, "GET", "/readyz", "", nil))
	c.check("GET", "/metrics", e.do(t, "GET", "/metrics", "", nil))
	c.check("GET", "/", e.do(t, "GET", "/", "", nil))
	spec := c.check("GET", "/openapi.yaml", e.do(t, "GET", "/openapi.yaml", "", nil))
	onDisk, err := os.ReadFile("../openapi.yaml")
	if err != nil || !bytes.Equal(spec.body, onDisk) || !bytes.Equal(spec.body, dshd.OpenAPI) {
		t.Fatalf("/openapi.yaml does not serve ../openapi.yaml (%v)", err)
	}

	c.check("POST", "/v1/tenants", e.do(t, "POST", "/v1/tenants", adminToken, `{"name":"t"}`).want(t, 201))
	c.check("POST", "/v1/tenants", e.do(t, "POST", "/v1/tenants", adminToken, `{"name":`).want(t, 400))
	c.check("POST", "/v1/tenants", e.do(t, "POST", "/v1/tenants", "", `{"name":"t"}`).want(t, 401))
	c.check("POST", "/v1/tenants", e.do(t, "POST", "/v1/tenants", adminToken, big).want(t, 413))

	full := `{"name":"full","model":{"provider":"openai","model":"deepseek-chat","baseUrl":"https://api.deepseek.com"},
		"tools":{"mode":"both","allow":["echo"],"toolOrder":["echo","<unlisted-tools>"],
			"declared":[{"name":"pick","description":"the user picks","parameters":{"type":"object"},"executor":"client","timeoutMs":1000}]},
		"prompt":{"persona":"p","sections":[{"name":"s","order":1.5,"text":"t"}],"variables":{"x":"y"}},
		"approval":{"policy":"ask","ask":["echo"]},"limits":{"maxSteps":5}}`
	var p struct{ ID string }
	c.check("POST", "/v1/presets", e.do(t, "POST", "/v1/presets", e.keyA, full).want(t, 201)).json(t, &p)
	c.check("POST", "/v1/presets", e.do(t, "POST", "/v1/presets", e.keyA, `{"name":"x"}`).want(t, 400))
	c.check("POST", "/v1/presets", e.do(t, "POST", "/v1/presets", "", full).want(t, 401))
	c.check("POST", "/v1/presets", e.do(t, "POST", "/v1/presets", e.keyA, big).want(t, 413))
	c.check("POST", "/v1/presets", e.do(t, "POST", "/v1/presets", e.keyA, full, "Content-Type", "text/plain").want(t, 415))
	c.check("POST", "/v1/presets", e.do(t, "POST", "/v1/presets", e.keyA, `{"name":"a","name":"b"}`).want(t, 400))
	c.check("GET", "/v1/presets", e.do(t, "GET", "/v1/presets?limit=1", e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/presets", e.do(t, "GET", "/v1/presets?limit=0", e.keyA, nil).want(t, 400))
	c.check("GET", "/v1/presets/{id}", e.do(t, "GET", "/v1/presets/"+p.ID, e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/presets/{id}", e.do(t, "GET", "/v1/presets/"+p.ID, e.keyB, nil).want(t, 404))
	c.check("PUT", "/v1/presets/{id}", e.do(t, "PUT", "/v1/presets/"+p.ID, e.keyA, minimalPreset).want(t, 200))
	c.check("PUT", "/v1/presets/{id}", e.do(t, "PUT", "/v1/presets/"+p.ID, e.keyA, `{}`).want(t, 400))
	c.check("GET", "/v1/presets/{id}/webhook-secret", e.do(t, "GET", "/v1/presets/"+p.ID+"/webhook-secret", e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/presets/{id}/webhook-secret", e.do(t, "GET", "/v1/presets/"+p.ID+"/webhook-secret", e.keyB, nil).want(t, 404))

	var s struct{ ID string }
	c.check("POST", "/v1/sessions", e.do(t, "POST", "/v1/sessions", e.keyA, `{"presetId":"`+p.ID+`"}`).want(t, 201)).json(t, &s)
	c.check("POST", "/v1/sessions", e.do(t, "POST", "/v1/sessions", e.keyA, `{}`).want(t, 400))
	c.check("POST", "/v1/sessions", e.do(t, "POST", "/v1/sessions", e.keyB, `{"presetId":"`+p.ID+`"}`).want(t, 404))
	sid := uuidOf(t, s.ID)
	e.appendEvents(sid, turnStart(1),
		eventlog.NewEvent{Type: "user/message", Data: llm.NewUserMessage("u1", "hi"), SurfaceOp: eventlog.Append},
		stepStart(1, 1), chunk(1, 1, "x"), stepEnd(1, 1), turnEnd(1), turnStart(2))
	c.check("POST", "/v1/sessions", e.do(t, "POST", "/v1/sessions", e.keyA, `{"fork":{"sessionId":"`+s.ID+`","boundarySeq":5}}`).want(t, 201))
	c.check("POST", "/v1/sessions", e.do(t, "POST", "/v1/sessions", e.keyA, `{"fork":{"sessionId":"`+s.ID+`"}}`).want(t, 409))
	c.check("POST", "/v1/sessions", e.do(t, "POST", "/v1/sessions", e.keyA, `{"fork":{"sessionId":"`+s.ID+`","boundarySeq":50}}`).want(t, 400))
	c.check("GET", "/v1/sessions", e.do(t, "GET", "/v1/sessions", e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/sessions/{id}", e.do(t, "GET", "/v1/sessions/"+s.ID, e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/sessions/{id}/history", e.do(t, "GET", "/v1/sessions/"+s.ID+"/history", e.keyA, nil).want(t, 200))
	hs := e.sessionCreate(t, e.keyA)
	e.appendEvents(hs, eventlog.NewEvent{Type: "user/message", Data: llm.NewUserMessage("h1", "a"), SurfaceOp: eventlog.Append},
		eventlog.NewEvent{Type: "user/message", Data: llm.NewUserMessage("h2", "b"), SurfaceOp: eventlog.Append})
	if r := c.check("GET", "/v1/sessions/{id}/history", e.do(t, "GET", "/v1/sessions/"+hs.String()+"/history?limit=1", e.keyA, nil).want(t, 200)); !bytes.Contains(r.body, []byte(`"nextCursor":"`)) {
		t.Fatalf("a first page of one of two messages has no nextCursor: %s", r.body)
	}
	c.check("GET", "/v1/sessions/{id}/history", e.do(t, "GET", "/v1/sessions/"+s.ID+"/history?cursor=x", e.keyA, nil).want(t, 400))
	c.check("GET", "/v1/sessions/{id}/events", e.do(t, "GET", "/v1/sessions/"+s.ID+"/events?limit=3", e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/sessions/{id}/events", e.do(t, "GET", "/v1/sessions/"+s.ID+"/events?after=z", e.keyA, nil).want(t, 400))
	c.check("GET", "/v1/sessions/{id}/events", e.do(t, "GET", "/v1/sessions/"+s.ID+"/events", e.keyB, nil).want(t, 404))
	// The Accept form of GET .../events is an alias of streamSessionEvents, which documents it.
	stream := openStream(t, streamURL(e.replica, sid), e.keyA)
	stream.next(t)
	c.check("GET", "/v1/sessions/{id}/events/stream", response{status: stream.resp.StatusCode, header: stream.resp.Header})
	c.check("GET", "/v1/sessions/{id}/events/stream", e.do(t, "GET", "/v1/sessions/"+s.ID+"/events", e.keyA, nil, "Accept", "text/event-stream").want(t, 429))
	stream = openStream(t, streamURL(e.replica, hs)+"/stream", e.keyA, "Accept", "*/*")
	stream.next(t)
	c.check("GET", "/v1/sessions/{id}/events/stream", response{status: stream.resp.StatusCode, header: stream.resp.Header})
	c.check("GET", "/v1/sessions/{id}/events/stream", e.do(t, "GET", "/v1/sessions/"+hs.String()+"/events/stream", e.keyA, nil).want(t, 429))
	c.check("GET", "/v1/sessions/{id}/events/stream", e.do(t, "GET", "/v1/sessions/"+uuid.NewString()+"/events/stream", e.keyA, nil).want(t, 404))

	// The agent loop's endpoints, on a session of a scripted preset.
	var sp struct{ ID string }
	c.check("POST", "/v1/presets", e.do(t, "POST", "/v1/presets", e.keyA, minimalPreset).want(t, 201)).json(t, &sp)
	var ss struct{ ID string }
	c.check("POST", "/v1/sessions", e.do(t, "POST", "/v1/sessions", e.keyA, `{"presetId":"`+sp.ID+`"}`).want(t, 201)).json(t, &ss)
	msgs := "/v1/sessions/" + ss.ID + "/messages"
	c.check("POST", "/v1/sessions/{id}/messages", e.do(t, "POST", msgs, e.keyA, `{"content":"text"}`).want(t, 202))
	c.check("POST", "/v1/sessions/{id}/messages", e.do(t, "POST", msgs, e.keyA, `{"content":"x","mode":"later"}`).want(t, 400))
	c.check("POST", "/v1/sessions/{id}/messages", e.do(t, "POST", msgs, e.keyB, `{"content":"text"}`).want(t, 404))
	c.check("POST", "/v1/sessions/{id}/messages", e.do(t, "POST", msgs, e.keyA, `{"content":"a"}`, "Idempotency-Key", "k1").want(t, 202))
	c.check("POST", "/v1/sessions/{id}/messages", e.do(t, "POST", msgs, e.keyA, `{"content":"b"}`, "Idempotency-Key", "k1").want(t, 409))
	var ms1 struct{ ID string } // a session of its own: the stream's place is given back as it ends
	c.check("POST", "/v1/sessions", e.do(t, "POST", "/v1/sessions", e.keyA, `{"presetId":"`+sp.ID+`"}`).want(t, 201)).json(t, &ms1)
	ms := postStreamTo(t, e.replica, "/v1/sessions/"+ms1.ID+"/messages/stream", e.keyA, `{"content":"note","mode":"inject"}`)
	c.check("POST", "/v1/sessions/{id}/messages/stream", response{status: ms.resp.StatusCode, header: ms.resp.Header})
	ms.untilEnd(t)
	c.check("POST", "/v1/sessions/{id}/messages/stream", e.do(t, "POST", msgs+"/stream", e.keyA, `{"content":"x","mode":"later"}`).want(t, 400))
	c.check("POST", "/v1/sessions/{id}/messages/stream", e.do(t, "POST", msgs+"/stream", e.keyB, `{"content":"text"}`).want(t, 404))
	c.check("POST", "/v1/sessions/{id}/cancel", e.do(t, "POST", "/v1/sessions/"+ss.ID+"/cancel", e.keyA, `{"keepInbox":true}`).want(t, 200))
	c.check("POST", "/v1/sessions/{id}/cancel", e.do(t, "POST", "/v1/sessions/"+ss.ID+"/cancel", e.keyB, `{}`).want(t, 404))
	at := "/v1/sessions/" + ss.ID + "/action-tokens"
	c.check("POST", "/v1/sessions/{id}/action-tokens", e.do(t, "POST", at, e.keyA, `{"scopes":["post","cancel"]}`).want(t, 201))
	c.check("POST", "/v1/sessions/{id}/action-tokens", e.do(t, "POST", at, e.keyA, `{"scopes":[]}`).want(t, 400))
	c.check("POST", "/v1/sessions/{id}/action-tokens", e.do(t, "POST", at, e.keyB, `{"scopes":["post"]}`).want(t, 404))
	c.check("GET", "/v1/sessions/{id}/prompt", e.do(t, "GET", "/v1/sessions/"+ss.ID+"/prompt", e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/sessions/{id}/prompt", e.do(t, "GET", "/v1/sessions/"+ss.ID+"/prompt", e.keyB, nil).want(t, 404))
	c.check("GET", "/v1/tools", e.do(t, "GET", "/v1/tools", e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/tools", e.do(t, "GET", "/v1/tools", "", nil).want(t, 401))

	// Approvals: one asked in the open turn 2 of s.
	e.appendEvents(sid, eventlog.Of(eventlog.ApprovalAsked{ID: "ap1", ToolName: "echo", CallID: "c1",
		Arguments: []byte(`{"text":"x"}`)}))
	aps := "/v1/sessions/" + s.ID + "/approvals"
	c.check("GET", "/v1/sessions/{id}/approvals", e.do(t, "GET", aps, e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/sessions/{id}/approvals", e.do(t, "GET", aps, e.keyB, nil).want(t, 404))
	c.check("POST", "/v1/sessions/{id}/approvals/{approvalId}", e.do(t, "POST", aps+"/ap1", e.keyA, `{"outcome":"often"}`).want(t, 400))
	c.check("POST", "/v1/sessions/{id}/approvals/{approvalId}", e.do(t, "POST", aps+"/ap1", e.keyA, `{"outcome":"rejected"}`).want(t, 200))
	c.check("POST", "/v1/sessions/{id}/approvals/{approvalId}", e.do(t, "POST", aps+"/ap1", e.keyA, `{"outcome":"rejected"}`).want(t, 409))
	c.check("POST", "/v1/sessions/{id}/approvals/{approvalId}", e.do(t, "POST", aps+"/ap2", e.keyA, `{"outcome":"rejected"}`).want(t, 404))

	for _, f := range contractExtras { // the operations of other files, on s (turns 1 and 2) and ss
		f(t, e, c, s.ID, ss.ID)
	}

	c.check("DELETE", "/v1/sessions/{id}", e.do(t, "DELETE", "/v1/sessions/"+s.ID, e.keyA, nil).want(t, 204))
	c.check("DELETE", "/v1/sessions/{id}", e.do(t, "DELETE", "/v1/sessions/"+s.ID, e.keyA, nil).want(t, 404))
	c.check("DELETE", "/v1/presets/{id}", e.do(t, "DELETE", "/v1/presets/"+p.ID, e.keyA, nil).want(t, 204))
	c.check("DELETE", "/v1/presets/{id}", e.do(t, "DELETE", "/v1/presets/"+p.ID, e.keyA, nil).want(t, 404))

	c.coverage(e.api.Routes())
}

// coverage fails the test unless the documented operations are exactly the router's routes and
// each was exercised with a success status.
func (c *contract) coverage(routes []string) {
	t := c.t
	paths, _ := c.spec["paths"].(map[string]any)
	var documented []string
	for path, item := range paths {
		for method := range item.(map[string]any) {
			if method == "parameters" {
				continue
			}
			op := strings.ToUpper(method) + " " + path
			documented = append(documented, op)
			if !slices.ContainsFunc([]string{"200", "201", "202", "204"}, func(s string) bool { return c.tested[op+" "+s] }) {
				t.Errorf("%s: no successful response was validated", op)
			}
		}
	}
	slices.Sort(documented)
	if !slices.Equal(documented, routes) {
		t.Errorf("openapi.yaml documents\n%s\nthe router serves\n%s", strings.Join(documented, "\n"), strings.Join(routes, "\n"))
	}
}

// TestKinRejectsDrift makes sure the validation can fail: drifted shapes are caught.
func TestKinRejectsDrift(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ schema, body string }{
		"missing":    {"Preset", `{"id":"6f1c1d0e-7b9a-4c47-9a57-1f0c2a3b4c5d"}`},
		"extra":      {"Problem", `{"type":"t","title":"t","status":400,"code":"invalid_request","detail":"d","x":1}`},
		"enum":       {"Problem", `{"type":"t","title":"t","status":400,"code":"oops","detail":"d"}`},
		"type":       {"EventPage", `{"events":[],"nextAfter":"1"}`},
		"nested":     {"EventPage", `{"events":[{"type":"t","seq":-1,"time":1,"data":{}}],"nextAfter":1}`},
		"oneOf":      {"Event", `{"type":"t","seq":1,"time":1,"data":{},"surfaceOp":"prepend"}`},
		"format":     {"Session", `{"id":"x","presetId":null,"presetVersion":null,"createdAt":"2020-01-01T00:00:00Z","lastSeq":-1}`},
		"allOf":      {"Preset", `{"id":"6f1c1d0e-7b9a-4c47-9a57-1f0c2a3b4c5d","version":1,"createdAt":"2020-01-01T00:00:00Z","updatedAt":"2020-01-01T00:00:00Z","name":"n","model":{"provider":"scripted","model":"m"},"tools":{},"prompt":{"persona":"","sections":[],"variables":{}},"approval":{"policy":"ask","ask":[],"timeoutMs":1},"limits":{"maxSteps":1}}`},
		"date-time":  {"TenantCreated", `{"id":"6f1c1d0e-7b9a-4c47-9a57-1f0c2a3b4c5d","name":"n","apiKey":"k","createdAt":"yesterday"}`},
		"additional": {"Prompt", `{"variables":{"a":1}}`},
	} {
		var v any
		if err := json.Unmarshal([]byte(tc.body), &v); err != nil {
			t.Fatal(err)
		}
		if err := kinSchema(tc.schema, v); err == nil {
			t.Errorf("%s: kin-openapi finds %s a valid %s", name, tc.body, tc.schema)
		}
	}
}
