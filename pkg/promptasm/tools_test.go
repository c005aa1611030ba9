package promptasm

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/llm"
)

func TestPRM4_SchemasReducedAndParametersCloned(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{})
	params := []byte(`{"type":"object"}`)
	must(t)(r.Tools(Global, func(context.Context, Input) (ToolSet, error) {
		return ToolSet{Schemas: []llm.ToolSchema{{Name: "echo", Description: "Echo.", Parameters: params}}}, nil
	}))
	res := assemble(t, r, Input{})
	if len(res.Tools) != 1 || res.Tools[0].Name != "echo" || res.Tools[0].Description != "Echo." ||
		string(res.Tools[0].Parameters) != `{"type":"object"}` {
		t.Fatalf("tools = %+v", res.Tools)
	}
	params[2] = 'X'
	if string(res.Tools[0].Parameters) != `{"type":"object"}` {
		t.Fatalf("result aliases the provider's parameters: %s", res.Tools[0].Parameters)
	}
	res.Tools[0].Parameters[2] = 'Y'
	params[2] = 't'
	if got := string(assemble(t, r, Input{}).Tools[0].Parameters); got != `{"type":"object"}` {
		t.Fatalf("next assembly parameters = %s", got)
	}
}

func TestPRM4_GlobalProvidersFirstThenChain(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{})
	var calls []string
	provider := func(label string) ToolProviderFunc {
		return func(context.Context, Input) (ToolSet, error) {
			calls = append(calls, label)
			return ToolSet{Schemas: []llm.ToolSchema{schema(label)}}, nil
		}
	}
	must(t)(r.Tools("session", provider("session")))
	must(t)(r.Tools("preset", provider("preset")))
	must(t)(r.Tools(Global, provider("global1")))
	must(t)(r.Tools(Global, provider("global2")))
	must(t)(r.Tools("other", provider("other")))
	res := assemble(t, r, Input{Chain: Chain{"preset", "session"}})
	if got := strings.Join(calls, ","); got != "global1,global2,preset,session" {
		t.Fatalf("provider calls = %s", got)
	}
	if got := toolNamesOf(res.Tools); got != "global1,global2,preset,session" {
		t.Fatalf("tools = %s", got)
	}
}

func TestPRM4_ProviderFailures(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{})
	dispose := must(t)(r.Tools(Global, func(context.Context, Input) (ToolSet, error) {
		return ToolSet{}, errors.New("registry offline")
	}))
	if ae := assembleErr(t, r, Input{}, nil); !strings.Contains(ae.Error(), "tool provider: registry offline") {
		t.Fatalf("error = %q", ae.Error())
	}
	dispose()
	must(t)(r.Tools(Global, staticTools("a", "b")))
	must(t)(r.Tools("s", staticTools("b")))
	assembleErr(t, r, Input{Chain: Chain{"s"}}, ErrDuplicateTool)
}

func TestPRM5_ValidateToolOrder(t *testing.T) {
	t.Parallel()
	cases := []struct {
		order []string
		ok    bool
	}{
		{[]string{ToolOrderRest}, true},
		{[]string{"zulu", ToolOrderRest, "alpha"}, true},
		{nil, false},
		{[]string{}, false},
		{[]string{"alpha"}, false},
		{[]string{"alpha", ToolOrderRest, "alpha"}, false},
		{[]string{ToolOrderRest, ToolOrderRest}, false},
	}
	for _, tc := range cases {
		err := ValidateToolOrder(tc.order)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalidToolOrder)) {
			t.Errorf("ValidateToolOrder(%q) = %v, want ok=%v", tc.order, err, tc.ok)
		}
	}
	if _, err := New(Config{ToolOrder: []string{"a"}}); !errors.Is(err, ErrInvalidToolOrder) {
		t.Errorf("New with a bad toolOrder: err = %v", err)
	}
	r := newRegistry(t, Config{})
	assembleErr(t, r, Input{ToolOrder: []string{"a", "a", ToolOrderRest}}, ErrInvalidToolOrder)
}

func TestPRM5_NameOrderIsByteOrder(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{})
	must(t)(r.Tools(Global, staticTools("b", "é", "B", "a", "_x", "a1")))
	if got := toolNamesOf(assemble(t, r, Input{}).Tools); got != "B,_x,a,a1,b,é" {
		t.Fatalf("tools = %s", got)
	}
}

func TestPRM5_ListedPositionsAndRestAtMarker(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{ToolOrder: []string{"c", ToolOrderRest, "a"}})
	must(t)(r.Tools(Global, staticTools("d", "a", "c", "b")))
	if got := toolNamesOf(assemble(t, r, Input{}).Tools); got != "c,b,d,a" {
		t.Fatalf("config order: tools = %s", got)
	}
	in := Input{ToolOrder: []string{ToolOrderRest, "b"}}
	if got := toolNamesOf(assemble(t, r, in).Tools); got != "a,c,d,b" {
		t.Fatalf("input order: tools = %s", got)
	}
}

func TestPRM5_KnownButHiddenNameIsSkipped(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{ToolOrder: []string{"bash", "read", ToolOrderRest}})
	must(t)(r.Tools(Global, func(context.Context, Input) (ToolSet, error) {
		// bash is restricted away in this scope but still known.
		return ToolSet{Schemas: []llm.ToolSchema{schema("read"), schema("capture")},
			KnownNames: []string{"bash", "read", "capture"}}, nil
	}))
	if got := toolNamesOf(assemble(t, r, Input{}).Tools); got != "read,capture" {
		t.Fatalf("tools = %s", got)
	}
}

func TestPRM5_UnknownListedNameRejects(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{ToolOrder: []string{"ghost", "spook", ToolOrderRest}})
	must(t)(r.Tools(Global, staticTools("read", "bash")))
	ae := assembleErr(t, r, Input{}, ErrUnknownTool)
	want := `assemble system prompt: toolOrder lists an unknown tool: "ghost", "spook"; known tools: bash, read`
	if ae.Error() != want {
		t.Fatalf("error = %q\nwant    %q", ae.Error(), want)
	}
	empty := newRegistry(t, Config{ToolOrder: []string{"ghost", ToolOrderRest}})
	if ae := assembleErr(t, empty, Input{}, ErrUnknownTool); !strings.HasSuffix(ae.Error(), "known tools: (none)") {
		t.Fatalf("error = %q", ae.Error())
	}
}

func TestPRM5_ReservedMarkerAsToolRejects(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{})
	must(t)(r.Tools(Global, staticTools("a", ToolOrderRest)))
	assembleErr(t, r, Input{}, ErrReservedToolName)
}

func TestPRM5_OrderingHappensBeforeTheWaterfall(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{})
	must(t)(r.Tools(Global, staticTools("zulu", "alpha")))
	var seen string
	must(t)(r.OnAssemble(Global, func(ctx context.Context, a Assembly, next Next) (Assembly, error) {
		seen = toolNamesOf(a.Tools)
		a.Tools = append(a.Tools, schema("added"))
		return next(ctx, a)
	}))
	res := assemble(t, r, Input{})
	if seen != "alpha,zulu" || toolNamesOf(res.Tools) != "alpha,zulu,added" {
		t.Fatalf("listener saw %s, result %s", seen, toolNamesOf(res.Tools))
	}
}

func TestScenario27_ToolOrdering(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{})
	for _, name := range []string{"zulu", "alpha", "mike"} {
		must(t)(r.Tools(Global, staticTools(name)))
	}
	if got := toolNamesOf(assemble(t, r, Input{}).Tools); got != "alpha,mike,zulu" {
		t.Fatalf("default order = %s", got)
	}
	if got := toolNamesOf(assemble(t, r, Input{ToolOrder: []string{"zulu", ToolOrderRest}}).Tools); got != "zulu,alpha,mike" {
		t.Fatalf("toolOrder order = %s", got)
	}
	// A missing tool rejects the assembly, so the loop ends the turn before any step (PRM-8).
	assembleErr(t, r, Input{ToolOrder: []string{"zulu", "missing", ToolOrderRest}}, ErrUnknownTool)
}
