package registry

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/kernel"
)

func TestREG1_RegisterFilesInCallersLayerWithIdempotentDisposer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	a := e.scope("agent:a", "")
	d := e.register(a, rawTool("t", `"a"`, nil))
	if _, ok := e.r.Get("t", ""); ok {
		t.Fatal("scoped registration leaked to the global view")
	}
	if _, ok := e.r.Get("t", "agent:a"); !ok {
		t.Fatal("scoped registration not visible in its scope")
	}
	d()
	d()
	if _, ok := e.r.Get("t", "agent:a"); ok {
		t.Fatal("disposer did not unregister")
	}
	e.register(a, rawTool("t", `"again"`, nil))
}

func TestREG2_RegistrationChecks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	noOut := rawTool("a", `1`, nil)
	noOut.Output = nil
	noRender := rawTool("b", `1`, nil)
	noRender.Output.Render = nil
	badSchema := rawTool("c", `1`, nil)
	badSchema.Output.Schema = json.RawMessage(`{"type":"string","pattern":"x","format":"y"}`)
	badTimeout := rawTool("d", `1`, nil)
	badTimeout.TimeoutMs = -1
	cases := []struct {
		tool *Tool
		want string
	}{
		{noOut, "output is required"},
		{noRender, "output.render must be a function"},
		{badSchema, `unsupported keyword "pattern"; #: unsupported keyword "format"`},
		{badTimeout, "timeoutMs must be a finite number greater than 0"},
		{rawTool(RunCodeName, `1`, nil), `"run_code" is reserved`},
	}
	for _, c := range cases {
		_, err := e.r.Register(e.g, c.tool)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v", c.tool.Name, err)
		}
	}
	_, err := e.r.Register(e.g, badSchema)
	var se *SchemaError
	if !errors.As(err, &se) || se.ErrorInfo().Code != fault.CodeUnsupportedSchema {
		t.Fatalf("want UNSUPPORTED_SCHEMA, got %v", err)
	}
	e.register(e.g, rawTool("dup", `1`, nil))
	_, err = e.r.Register(e.g, rawTool("dup", `1`, nil))
	if err == nil || !strings.Contains(err.Error(), "global layer; register it through an agent's context") {
		t.Fatalf("global duplicate: %v", err)
	}
}

func TestREG3_ParametersCheckedOnlyAtProjection(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	tool := rawTool("t", `1`, nil)
	tool.Parameters = json.RawMessage(`{"type":"object","minProperties":1}`)
	e.register(e.g, tool)
	if _, err := e.r.Schemas(""); err != nil {
		t.Fatalf("unsupported but lossless parameters must project: %v", err)
	}
	bad := rawTool("u", `1`, nil)
	bad.Parameters = json.RawMessage(`{"type":`)
	e.register(e.g, bad)
	if _, err := e.r.Schemas(""); err == nil {
		t.Fatal("non-JSON parameters must fail projection")
	}
}

func TestREG4_SchemasProjectNameDescriptionAndCopiedParameters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	tool := echoTool(t, nil)
	tool.TimeoutMs = 5
	e.register(e.g, tool)
	s, err := e.r.Schemas("")
	if err != nil || len(s) != 1 {
		t.Fatal(s, err)
	}
	b, _ := json.Marshal(s[0])
	want := `{"name":"echo","description":"echo the text","parameters":{"properties":{"text":{"type":"string"}},"type":"object","required":["text"]}}`
	if string(b) != want {
		t.Fatalf("got %s", b)
	}
	s[0].Parameters[0] = 'X'
	again, _ := e.r.Schemas("")
	if again[0].Parameters[0] != '{' {
		t.Fatal("parameters were not deep-copied")
	}
	tool.Parameters[0] = 'X' // the registered copy is the registry's own
	if again, err := e.r.Schemas(""); err != nil || again[0].Parameters[0] != '{' {
		t.Fatalf("a change of the registered definition reached the registry: %v", err)
	}
}

func TestREG5_GetAppliesShadowingRestrictionsAndRunCode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("t", `"g"`, nil))
	e.register(e.g, rawTool("hidden", `"h"`, nil))
	a := e.scope("agent:a", "")
	e.register(a, rawTool("t", `"a"`, nil))
	e.r.Restrict(a, Restriction{Deny: []string{"hidden"}})
	if tool, _ := e.r.Get("t", "agent:a"); tool.Description != "test tool t" {
		t.Fatal("lookup failed")
	}
	if _, ok := e.r.Get("hidden", "agent:a"); ok {
		t.Fatal("restricted tool must read as absent")
	}
	rc := rawTool(RunCodeName, `"rc"`, nil)
	if _, err := e.r.InstallRunCode(e.g, rc); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.r.Get(RunCodeName, "agent:a"); ok {
		t.Fatal("run_code visible in native mode")
	}
	e.r.PresentAs(a, ModeBoth)
	if _, ok := e.r.Get(RunCodeName, "agent:a"); !ok {
		t.Fatal("run_code hidden in both mode")
	}
}

func TestREG6_ChangeEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	a := e.scope("agent:a", "")
	var kinds []string
	// A scoped listener still receives the unfiltered change events.
	kernel.Listen(a, e.r.Hooks.Change, func(_ context.Context, c Change) error {
		kinds = append(kinds, c.Kind+":"+c.Name)
		return nil
	})
	d := e.register(e.g, rawTool("t", `1`, nil))
	r, _ := e.r.Restrict(a, Restriction{Deny: []string{"t"}})
	p, _ := e.r.PresentAs(a, ModeCode)
	e.r.Guard(e.g, func(*Execution) string { return "" })
	p()
	r()
	d()
	want := "register:t,restrict:,present-as:,present-as-removed:,unrestrict:,unregister:t"
	if got := strings.Join(kinds, ","); got != want {
		t.Fatalf("got %s", got)
	}
}

func TestREG7_ChangeListenerFailureRollsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	f := e.k.Fiber("veto", nil)
	kernel.Listen(f, e.r.Hooks.Change, func(context.Context, Change) error { return errors.New("veto") })
	if _, err := e.r.Register(e.g, rawTool("t", `1`, nil)); err == nil || !strings.Contains(err.Error(), "veto") {
		t.Fatalf("got %v", err)
	}
	if _, ok := e.r.Get("t", ""); ok {
		t.Fatal("registration not rolled back")
	}
	f.Dispose()
	e.register(e.g, rawTool("t", `1`, nil))
}

func TestKRN6_ScopedLayersReclaimedWhenEmpty(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	a := e.scope("agent:a", "")
	d := e.register(a, rawTool("t", `1`, nil))
	g, _ := e.r.Guard(a, func(*Execution) string { return "" })
	d()
	g()
	e.r.mu.RLock()
	n := len(e.r.layers)
	e.r.mu.RUnlock()
	if n != 1 {
		t.Fatalf("%d layers left, want only the global one", n)
	}
}

func TestREG8_DisposingFiberRemovesEverything(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("base", `1`, nil))
	a := e.scope("agent:a", "")
	plugin := e.k.Fiber("plugin", a.Scope())
	e.register(plugin, rawTool("t", `1`, nil))
	e.r.Restrict(plugin, Restriction{Deny: []string{"base"}})
	e.r.PresentAs(plugin, ModeCode)
	e.r.Guard(plugin, func(*Execution) string { return "no" })
	plugin.Dispose()
	if names := strings.Join(e.r.Names("agent:a"), ","); names != "base" {
		t.Fatalf("view after dispose: %s", names)
	}
	if e.r.EffectiveMode("agent:a") != ModeNative {
		t.Fatal("mode survived")
	}
	if r := e.execIn("agent:a", "base", `{}`); r.IsError {
		t.Fatalf("guard survived: %+v", r)
	}
}

func TestREG9_ExecutionModeExclusiveForHiddenAndCollapsed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, echoTool(t, nil))
	a := e.scope("agent:a", "")
	b := e.scope("agent:b", "")
	e.r.Restrict(a, Restriction{Deny: []string{"echo"}})
	e.r.PresentAs(b, ModeCode)
	in := Input{Name: "echo", Args: json.RawMessage(`{"text":"x"}`)}
	if e.r.ExecutionMode(in) != Parallel {
		t.Fatal("global call should be parallel")
	}
	in.Scope = "agent:a"
	if e.r.ExecutionMode(in) != Exclusive {
		t.Fatal("hidden tool must be exclusive")
	}
	in.Scope = "agent:b"
	if e.r.ExecutionMode(in) != Exclusive {
		t.Fatal("collapsed call must be exclusive")
	}
	in.Parent = &Token{}
	if e.r.ExecutionMode(in) != Parallel {
		t.Fatal("nested call is not collapsed")
	}
}

func TestCatalogue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("zeta", `1`, nil))
	e.register(e.g, echoTool(t, nil))
	items, err := e.r.Catalogue()
	if err != nil || len(items) != 2 || items[0].Name != "echo" || !items[0].ConcurrencySafe || items[1].ConcurrencySafe {
		t.Fatalf("got %+v %v", items, err)
	}
}

func TestREG8_RegistrationThroughDisposedFiberIsInactive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	a := e.scope("agent:a", "")
	a.Dispose()
	if _, err := e.r.Register(a, rawTool("t", `1`, nil)); !errors.Is(err, kernel.ErrInactiveEffect) {
		t.Fatalf("register: %v", err)
	}
	if _, err := e.r.Guard(a, func(*Execution) string { return "" }); !errors.Is(err, kernel.ErrInactiveEffect) {
		t.Fatalf("guard: %v", err)
	}
	if _, err := e.r.PresentAs(a, ModeCode); !errors.Is(err, kernel.ErrInactiveEffect) {
		t.Fatalf("presentAs: %v", err)
	}
}
