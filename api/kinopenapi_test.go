package api_test

import (
	"encoding/json"
	"testing"

	"github.com/dshd/dshd/internal/contracttest"
)

// kinDoc is openapi.yaml as kin-openapi reads it.
var kinDoc = contracttest.Doc

// kinSchema validates v against the component schema name with kin-openapi.
func kinSchema(name string, v any) error { return contracttest.Schema(name, v) }

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
