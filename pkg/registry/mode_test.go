package registry

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
)

func TestPRS1_DeploymentModeConfig(t *testing.T) {
	t.Parallel()
	r, err := New(Config{})
	if err != nil || r.Config().Mode != ModeNative || r.Config().MaxParallelSubCalls != 10 {
		t.Fatalf("defaults: %+v %v", r.Config(), err)
	}
	if _, err := New(Config{Mode: "fancy"}); err == nil {
		t.Fatal("bad mode accepted")
	}
	if _, err := New(Config{MaxParallelSubCalls: -1}); err == nil {
		t.Fatal("negative maxParallelSubCalls accepted")
	}
	e := newEnv(t, Config{Mode: ModeCode})
	if e.r.EffectiveMode("") != ModeCode {
		t.Fatal("deployment default not applied")
	}
}

func TestPRS2_PresentAsNearestWins(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	p := e.scope("preset:p", "")
	e.scope("agent:a", "preset:p")
	c := e.scope("agent:c", "preset:p")
	d, err := e.r.PresentAs(p, ModeCode)
	if err != nil {
		t.Fatal(err)
	}
	if e.r.EffectiveMode("agent:a") != ModeCode {
		t.Fatal("preset mode must cover its agents")
	}
	e.r.PresentAs(c, ModeBoth)
	if e.r.EffectiveMode("agent:c") != ModeBoth {
		t.Fatal("nearest declaration must win")
	}
	if _, err := e.r.PresentAs(p, ModeNative); err == nil || !strings.Contains(err.Error(), "already declared") {
		t.Fatalf("second declaration: %v", err)
	}
	if _, err := e.r.PresentAs(e.g, ModeCode); err == nil {
		t.Fatal("unscoped presentAs must throw")
	}
	d()
	if e.r.EffectiveMode("agent:a") != ModeNative {
		t.Fatal("dispose must restore the default")
	}
}

func TestPRS5_CodeModeCollapse(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	runs := 0
	finalized := 0
	tool := echoTool(t, &runs)
	tool.FinalizeContent = func(*Execution, *Result) ([]llm.Block, error) { finalized++; return nil, nil }
	e.register(e.g, tool)
	a := e.scope("agent:a", "")
	b := e.scope("agent:b", "")
	e.r.PresentAs(a, ModeCode)
	e.r.PresentAs(b, ModeBoth)
	var c counters
	e.count(&c)
	r := e.execIn("agent:a", "echo", `{"text":"x"}`)
	want := "Error: unknown tool \"echo\": only `run_code` is callable directly — call `echo` from inside a `run_code` program instead"
	if contentText(r) != want || code(r) != fault.CodeUnknownTool || runs != 0 || c.pre != 0 || finalized != 0 {
		t.Fatalf("got %q runs=%d pre=%d finalized=%d", contentText(r), runs, c.pre, finalized)
	}
	if r := e.execIn("agent:a", "ghost", `{}`); contentText(r) != `Error: unknown tool "ghost"` {
		t.Fatalf("invisible name: %q", contentText(r))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r = e.r.Execute(ctx, Input{CallID: "c", Name: "echo", Args: json.RawMessage(`{"text":"x"}`), Scope: "agent:a"})
	if code(r) != fault.CodeAbortedBeforeDispatch || finalized != 1 {
		t.Fatalf("pre-aborted collapse: %+v finalized=%d", r, finalized)
	}
	if r := e.execIn("agent:b", "echo", `{"text":"x"}`); r.IsError {
		t.Fatalf("both must not collapse: %+v", r)
	}
	nested := e.r.Execute(e.ctx, Input{CallID: "c", Name: "echo", Args: json.RawMessage(`{"text":"x"}`), Scope: "agent:a", Parent: &Token{}})
	if nested.IsError {
		t.Fatalf("nested call must not collapse: %+v", nested)
	}
}
