package registry

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/fault"
)

type nestedArgs struct {
	Name  string            `json:"name"`
	Opt   *inner            `json:"opt,omitempty"`
	Meta  map[string]any    `json:"meta,omitempty"`
	Any   any               `json:"any,omitempty"`
	Count int               `json:"count,omitempty"`
	List  []inner           `json:"list,omitempty"`
	Extra map[string]string `json:"-"`
}

type inner struct {
	A bool `json:"a"`
}

func TestSCH3_DefineSchemaShape(t *testing.T) {
	t.Parallel()
	tool, err := Define(DefineSpec[nestedArgs, any]{Name: "n"}, func(context.Context, *Execution, nestedArgs) (any, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	want := `{"properties":{"name":{"type":"string"},"opt":{"properties":{"a":{"type":"boolean"}},"additionalProperties":false,"type":"object","required":["a"]},"meta":{"type":"object","additionalProperties":true},"any":{},"count":{"type":"integer"},"list":{"items":{"properties":{"a":{"type":"boolean"}},"additionalProperties":false,"type":"object","required":["a"]},"type":"array"}},"type":"object","required":["name"]}`
	if string(tool.Parameters) != want {
		t.Fatalf("got %s", tool.Parameters)
	}
	if strings.Contains(string(tool.Parameters), "$ref") || strings.Contains(string(tool.Parameters), "$schema") {
		t.Fatal("schema not inline")
	}
	type bad struct {
		M map[string]string `json:"m"`
	}
	if _, err := Define(DefineSpec[bad, any]{Name: "b"}, func(context.Context, *Execution, bad) (any, error) { return nil, nil }); err == nil || !strings.Contains(err.Error(), "additionalProperties must be a boolean") {
		t.Fatalf("map of strings must be outside the subset: %v", err)
	}
}

func TestSCH9_ValidationInsideExecute(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	runs := 0
	e.register(e.g, echoTool(t, &runs))
	var c counters
	e.count(&c)
	r := e.exec("echo", `{"text":1,"x":2}`)
	if r.Error.Message != `invalid arguments: "text" must be a string` || *r.ErrorInfo() != (fault.Info{Name: NameToolArgs, Code: fault.CodeInvalidArgs}) {
		t.Fatalf("got %+v", r.Error)
	}
	if c.pre != 1 || c.around != 1 || c.post != 1 || runs != 0 {
		t.Fatalf("stages %+v runs %d", c, runs)
	}
	if r := e.exec("echo", `"{bad json kept as a string"`); r.Error.Message != `invalid arguments: "arguments" must be an object` {
		t.Fatalf("got %q", r.Error.Message)
	}
	tool, _ := Define(DefineSpec[pathArgs, string]{Name: "two"}, func(context.Context, *Execution, pathArgs) (string, error) { return "", nil })
	_ = tool
	s := mustSchema(t, `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":["a","b"]}`)
	if got := argsError(s.ValidateJSON(json.RawMessage(`{}`))).Error(); got != `invalid arguments: missing required property "a"; missing required property "b"` {
		t.Fatalf("got %q", got)
	}
}

func TestSCH10_RawToolsNotValidatedButOutputEnforced(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	tool := rawTool("mcp", `"ok"`, nil)
	tool.Parameters = json.RawMessage(`{"type":"object","properties":{"x":{"type":"string"}},"required":["x"]}`)
	tool.Output.Schema = json.RawMessage(`{"type":"integer"}`)
	e.register(e.g, tool)
	r := e.exec("mcp", `{"x":5}`)
	if code(r) != fault.CodeInvalidToolOutput || r.Error.Message != `tool "mcp" returned invalid output: "value" must be an integer` {
		t.Fatalf("got %+v", r.Error)
	}
}

func TestSCH11_SoftPresentCallAndClassifier(t *testing.T) {
	t.Parallel()
	tool, err := Define(DefineSpec[echoArgs, string]{
		Name:              "e",
		PresentCall:       func(a echoArgs) string { return "echo " + a.Text },
		IsConcurrencySafe: func(a echoArgs) bool { return a.Text != "no" },
	}, func(_ context.Context, _ *Execution, a echoArgs) (string, error) { return a.Text, nil })
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args, label string
		safe        bool
	}{
		{`{"text":"hi"}`, "echo hi", true},
		{`{"text":"no"}`, "echo no", false},
		{`{"text":3}`, "", false},
		{`{`, "", false},
	}
	for _, c := range cases {
		if got := tool.PresentCall(json.RawMessage(c.args)); got != c.label {
			t.Errorf("%s: label %q", c.args, got)
		}
		if got := tool.IsConcurrencySafe(json.RawMessage(c.args)); got != c.safe {
			t.Errorf("%s: safe %v", c.args, got)
		}
	}
}

type outShape struct {
	N int `json:"n"`
}

func TestSCH12_OutputSnapshotValidated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	tool, err := Define(DefineSpec[echoArgs, outShape]{Name: "o"}, func(_ context.Context, _ *Execution, a echoArgs) (outShape, error) {
		return outShape{N: len(a.Text)}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.register(e.g, tool)
	if r := e.exec("o", `{"text":"abc"}`); r.IsError || string(r.Value) != `{"n":3}` || contentText(r) != `{"n":3}` {
		t.Fatalf("got %+v", r)
	}
	e.post(func(*Call) PostDecision { return PostDecision{Value: json.RawMessage(`{"n":"x"}`)} })
	if r := e.exec("o", `{"text":"abc"}`); r.Error.Message != `tool "o" returned invalid output: "value.n" must be an integer` {
		t.Fatalf("got %+v", r.Error)
	}
}
