package registry

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
)

func TestPIPE1_ArgsCopiedOnceAndRootCallIDDefaults(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	var seen *Execution
	tool := rawTool("t", `1`, nil)
	tool.Execute = func(_ context.Context, x *Execution) (json.RawMessage, error) {
		seen = x
		return json.RawMessage(`1`), nil
	}
	e.register(e.g, tool)
	args := []byte(`{"a":1}`)
	p := e.r.Prepare(e.ctx, Input{CallID: "c7", Name: "t", Args: args})
	args[2] = 'X'
	e.r.Finalize(e.ctx, e.r.Dispatch(e.ctx, p))
	if string(seen.Args) != `{"a":1}` || seen.RootCallID != "c7" || seen.Token() == nil {
		t.Fatalf("got %s root=%s", seen.Args, seen.RootCallID)
	}
}

func TestPIPE2_NonLosslessArguments(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("t", `1`, nil))
	var c counters
	e.count(&c)
	for _, args := range []string{``, `{`, "\"\xff\"", `{} {}`} {
		p := e.r.Prepare(e.ctx, Input{CallID: "c", Name: "t", Args: json.RawMessage(args)})
		if p.Kind != PrepFinalResult {
			t.Fatalf("%q: kind %v", args, p.Kind)
		}
		r := e.r.Finish(e.ctx, p)
		if r.Error.Message != msgArgsNotLossless || r.Error.Info != nil {
			t.Fatalf("%q: %+v", args, r.Error)
		}
	}
	if c.pre != 0 || c.results != 4 {
		t.Fatalf("stages: %+v", c)
	}
}

func TestPIPE3_PreAbortedSkipsPolicyButFinalizes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	tool := rawTool("t", `1`, nil)
	fin := 0
	tool.FinalizeContent = func(*Execution, *Result) ([]llm.Block, error) { fin++; return nil, nil }
	e.register(e.g, tool)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := e.r.Prepare(ctx, Input{CallID: "c", Name: "t", Args: json.RawMessage(`{}`)})
	if p.Kind != PrepFinalResult || code(e.r.Finish(ctx, p)) != fault.CodeAbortedBeforeDispatch || fin != 1 {
		t.Fatalf("kind %v fin %d", p.Kind, fin)
	}
}

func TestPIPE4_PreExecuteSeesFrozenExecutionDefaultAllow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("t", `1`, nil))
	p := e.r.Prepare(e.ctx, Input{CallID: "c", Name: "t", Args: json.RawMessage(`{}`)})
	if p.Kind != PrepDispatch {
		t.Fatalf("default must allow, got %v", p.Kind)
	}
	var args string
	e.pre(e.g, Allow())
	kernel.Listen(e.g, e.r.Hooks.PreExecute, func(ctx context.Context, x *Execution, next func(context.Context) (Decision, error)) (Decision, error) {
		args = string(x.Args)
		return next(ctx)
	}, kernel.Prepend())
	e.r.Execute(e.ctx, Input{CallID: "c", Name: "t", Args: json.RawMessage(`{"q":1}`)})
	if args != `{"q":1}` {
		t.Fatalf("got %s", args)
	}
}

func TestPIPE5_DenialIsPostResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("t", `1`, nil))
	e.pre(e.g, Deny("nope"))
	p := e.r.Prepare(e.ctx, Input{CallID: "c", Name: "t", Args: json.RawMessage(`{}`)})
	if p.Kind != PrepPostResult || p.Result().Error.Message != "nope" || contentText(p.Result()) != "Error: nope" {
		t.Fatalf("got %v %+v", p.Kind, p.Result())
	}
}

func TestPIPE6_ThrowingPreExecuteIsFinal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("t", `1`, nil))
	var c counters
	e.count(&c)
	kernel.Listen(e.g, e.r.Hooks.PreExecute, func(context.Context, *Execution, func(context.Context) (Decision, error)) (Decision, error) {
		return Decision{}, NewError("HarnessError", "POLICY", "policy broke")
	})
	p := e.r.Prepare(e.ctx, Input{CallID: "c", Name: "t", Args: json.RawMessage(`{}`)})
	r := e.r.Finish(e.ctx, p)
	if p.Kind != PrepFinalResult || contentText(r) != "Error: policy broke" || code(r) != "POLICY" || c.post != 0 || c.results != 1 {
		t.Fatalf("got %v %+v %+v", p.Kind, r, c)
	}
	e2 := newEnv(t, Config{})
	e2.register(e2.g, rawTool("t", `1`, nil))
	kernel.Listen(e2.g, e2.r.Hooks.PreExecute, func(context.Context, *Execution, func(context.Context) (Decision, error)) (Decision, error) {
		panic("listener panic")
	})
	if r := e2.exec("t", `{}`); !strings.Contains(r.Error.Message, "listener panic") {
		t.Fatalf("panic: %+v", r.Error)
	}
	e3 := newEnv(t, Config{})
	e3.register(e3.g, rawTool("t", `1`, nil))
	e3.pre(e3.g, Ask(""))
	e3.r.MountApprover(ApproverFunc(func(context.Context, ApprovalRequest) (string, error) { return "maybe", nil }))
	if p := e3.r.Prepare(e3.ctx, Input{CallID: "c", Name: "t", Args: json.RawMessage(`{}`), Agent: "a"}); p.Kind != PrepFinalResult {
		t.Fatalf("unknown approval outcome must be final, got %v", p.Kind)
	}
}

func TestPIPE7_AbortDuringDecision(t *testing.T) {
	t.Parallel()
	for _, deny := range []bool{false, true} {
		e := newEnv(t, Config{})
		e.register(e.g, rawTool("t", `1`, nil))
		ctx, cancel := context.WithCancel(context.Background())
		kernel.Listen(e.g, e.r.Hooks.PreExecute, func(context.Context, *Execution, func(context.Context) (Decision, error)) (Decision, error) {
			cancel()
			if deny {
				return Deny("specific"), nil
			}
			return Allow(), nil
		})
		p := e.r.Prepare(ctx, Input{CallID: "c", Name: "t", Args: json.RawMessage(`{}`)})
		want := fault.CodeAbortedBeforeDispatch
		if deny {
			want = fault.CodeToolDenied
		}
		if p.Kind != PrepPostResult || code(p.Result()) != want {
			t.Fatalf("deny=%v: %v %+v", deny, p.Kind, p.Result())
		}
	}
}

func TestPIPE8_WrapperSignalCombinedAndOwnResultRevalidated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	tool := rawTool("t", `"v"`, nil)
	tool.Output.Schema = json.RawMessage(`{"type":"string"}`)
	started := make(chan struct{})
	tool.Execute = func(ctx context.Context, _ *Execution) (json.RawMessage, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	e.register(e.g, tool)
	f := e.k.Fiber("wrap", nil)
	kernel.Listen(f, e.r.Hooks.Execute, func(_ context.Context, _ *Execution, next func(context.Context) (*Result, error)) (*Result, error) {
		return next(context.Background()) // drops the caller's signal; the registry combines it back
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	r := e.r.Execute(ctx, Input{CallID: "c", Name: "t", Args: json.RawMessage(`{}`)})
	if !r.IsError || r.Error.Message != "context canceled" {
		t.Fatalf("body did not see the caller's abort: %+v", r)
	}
	f.Dispose()
	kernel.Listen(e.g, e.r.Hooks.Execute, func(context.Context, *Execution, func(context.Context) (*Result, error)) (*Result, error) {
		return &Result{Value: json.RawMessage(`42`)}, nil
	})
	if r := e.exec("t", `{}`); code(r) != fault.CodeInvalidToolOutput || !strings.Contains(r.Error.Message, `"value" must be a string`) {
		t.Fatalf("wrapper result not re-validated: %+v", r)
	}
}

func TestPIPE9_ToolResolvedAgainAtDispatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	d := e.register(e.g, rawTool("t", `1`, nil))
	var c counters
	e.count(&c)
	p := e.r.Prepare(e.ctx, Input{CallID: "c", Name: "t", Args: json.RawMessage(`{}`)})
	d()
	r := e.r.Finalize(e.ctx, e.r.Dispatch(e.ctx, p))
	if contentText(r) != `Error: unknown tool "t"` || c.pre != 1 || c.post != 1 {
		t.Fatalf("got %+v %+v", r, c)
	}
}

func TestPIPE10_BodyFailureSeenByWrapperAsResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, failingTool("t", errors.New("broken")))
	p := rawTool("p", `1`, nil)
	p.Execute = func(context.Context, *Execution) (json.RawMessage, error) { panic("kaboom") }
	e.register(e.g, p)
	var wrapperSaw *Result
	kernel.Listen(e.g, e.r.Hooks.Execute, func(ctx context.Context, _ *Execution, next func(context.Context) (*Result, error)) (*Result, error) {
		r, err := next(ctx)
		wrapperSaw = r
		return r, err
	})
	var c counters
	e.count(&c)
	r := e.exec("t", `{}`)
	if wrapperSaw == nil || !wrapperSaw.IsError || r.Error.Message != "broken" || r.Error.Info != nil || c.post != 1 {
		t.Fatalf("got %+v", r)
	}
	if r := e.exec("p", `{}`); !strings.Contains(r.Error.Message, "kaboom") {
		t.Fatalf("panic: %+v", r.Error)
	}
}

func TestPIPE11_ThrowingWrapperIsFinal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("t", `1`, nil))
	kernel.Listen(e.g, e.r.Hooks.Execute, func(context.Context, *Execution, func(context.Context) (*Result, error)) (*Result, error) {
		return nil, errors.New("wrapper broke")
	})
	var c counters
	e.count(&c)
	r := e.exec("t", `{}`)
	if contentText(r) != "Error: wrapper broke" || c.post != 0 || c.results != 1 {
		t.Fatalf("got %+v %+v", r, c)
	}
}

func TestPIPE12_ValueValidatedRenderedWithMeta(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	tool := rawTool("t", `{"n":1}`, nil)
	tool.Output.Schema = json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}`)
	tool.Output.PresentationMeta = func(args, v json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{"m":true}`), nil }
	e.register(e.g, tool)
	r := e.exec("t", `{}`)
	if r.IsError || string(r.Meta) != `{"m":true}` || contentText(r) != `{"n":1}` {
		t.Fatalf("got %+v", r)
	}
	nested := e.r.Execute(e.ctx, Input{CallID: "c", Name: "t", Args: json.RawMessage(`{}`), Parent: &Token{}})
	if nested.Meta != nil {
		t.Fatal("meta computed for a nested call")
	}
	bad := rawTool("bad", `{"n":1.5,"x":1}`, nil)
	bad.Output.Schema = tool.Output.Schema
	e.register(e.g, bad)
	want := `tool "bad" returned invalid output: "value.n" must be an integer; "value.x" is not a declared property (additionalProperties: false)`
	if r := e.exec("bad", `{}`); r.Error.Message != want {
		t.Fatalf("got %q", r.Error.Message)
	}
	panics := rawTool("pr", `1`, nil)
	panics.Output.Render = func(_, _ json.RawMessage) ([]llm.Block, error) { panic("render") }
	e.register(e.g, panics)
	if r := e.exec("pr", `{}`); code(r) != fault.CodeInvalidToolOutput {
		t.Fatalf("render panic: %+v", r)
	}
}

func TestPIPE13_BodyContextsBeforeWrapperContexts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	tool := rawTool("t", `1`, nil)
	tool.Execute = func(_ context.Context, x *Execution) (json.RawMessage, error) {
		x.DeferContext(userMsg("body"))
		return json.RawMessage(`1`), nil
	}
	e.register(e.g, tool)
	kernel.Listen(e.g, e.r.Hooks.Execute, func(ctx context.Context, x *Execution, next func(context.Context) (*Result, error)) (*Result, error) {
		r, err := next(ctx)
		x.DeferContext(userMsg("after"))
		return r, err
	})
	kernel.Listen(e.g, e.r.Hooks.Execute, func(ctx context.Context, x *Execution, next func(context.Context) (*Result, error)) (*Result, error) {
		x.DeferContext(userMsg("before"))
		return next(ctx)
	}, kernel.Prepend())
	if r := e.exec("t", `{}`); ctxIDs(r) != "body,before,after" {
		t.Fatalf("got %s", ctxIDs(r))
	}
}
