package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/dshd/dshd"
)

// kinDoc is openapi.yaml as github.com/getkin/kin-openapi reads it: a second, complete OpenAPI
// 3.1 and JSON Schema 2020-12 implementation beside the small validator of schema_test.go, which
// contract.check also runs on every response it checks.
var kinDoc = sync.OnceValues(func() (*openapi3.T, error) {
	l := openapi3.NewLoader()
	doc, err := l.LoadFromData(dshd.OpenAPI)
	if err != nil {
		return nil, err
	}
	return doc, doc.Validate(context.Background())
})

// kinCheck validates the decoded JSON body v of a status answer of operation method path with
// content type ct against openapi.yaml, with kin-openapi.
func kinCheck(method, path string, status int, ct string, v any) error {
	doc, err := kinDoc()
	if err != nil {
		return err
	}
	item := doc.Paths.Value(path)
	if item == nil {
		return fmt.Errorf("kin-openapi: no path %s", path)
	}
	op := item.GetOperation(strings.ToUpper(method))
	if op == nil {
		return fmt.Errorf("kin-openapi: no operation %s %s", method, path)
	}
	resp := op.Responses.Value(strconv.Itoa(status))
	if resp == nil || resp.Value == nil {
		return fmt.Errorf("kin-openapi: %s %s documents no %d", method, path, status)
	}
	media := resp.Value.Content.Get(ct)
	if media == nil || media.Schema == nil {
		return fmt.Errorf("kin-openapi: %s %s %d documents no %s schema", method, path, status, ct)
	}
	return media.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.MultiErrors())
}

// kinSchema validates v against the component schema name with kin-openapi.
func kinSchema(name string, v any) error {
	doc, err := kinDoc()
	if err != nil {
		return err
	}
	s := doc.Components.Schemas[name]
	if s == nil || s.Value == nil {
		return fmt.Errorf("kin-openapi: no schema %s", name)
	}
	return s.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.MultiErrors())
}

// TestKinOpenAPIReadsTheContract: kin-openapi loads openapi.yaml and finds it a valid OpenAPI 3.1
// document, and its validator tells the Event branches apart as the contract means them.
func TestKinOpenAPIReadsTheContract(t *testing.T) {
	t.Parallel()
	if _, err := kinDoc(); err != nil {
		t.Fatalf("kin-openapi: %v", err)
	}
	for body, ok := range map[string]bool{
		`{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}`:                                                                                                       true,
		`{"type":"turn/start","seq":0,"time":1,"data":{"turn":"one"}}`:                                                                                                   false,
		`{"type":"session/title","seq":0,"time":1,"data":{"title":"x"}}`:                                                                                                 true,
		`{"type":"vendor/new-kind","seq":0,"time":1,"data":{"x":1},"ignorable":true}`:                                                                                    true,
		`{"type":"vendor/new-kind","seq":0,"time":1,"data":{"x":1}}`:                                                                                                     false,
		`{"type":"turn/start","seq":0,"time":1,"data":{"turn":1},"surfaceOp":"prepend"}`:                                                                                 false,
		`{"type":"user/message","seq":0,"time":1,"data":{"id":"m","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}`: true,
	} {
		var v any
		if err := jsonDecode(body, &v); err != nil {
			t.Fatal(err)
		}
		if err := kinSchema("Event", v); (err == nil) != ok {
			t.Errorf("%s: kin-openapi says %v, want valid %v", body, err, ok)
		}
	}
}

func jsonDecode(s string, v any) error { return json.Unmarshal([]byte(s), v) }
