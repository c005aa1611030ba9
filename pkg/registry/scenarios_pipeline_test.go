package registry

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
)

func TestScenario13_PostExecuteAccept(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		tool     *Tool
		decision PostDecision
		check    func(*Result) bool
	}{
		{"content", rawTool("t", `"v"`, nil), PostDecision{Content: []llm.Block{llm.TextBlock("X")}},
			func(r *Result) bool { return !r.IsError && contentText(r) == "X" && string(r.Value) == `"v"` }},
		{"value", rawTool("t", `"v"`, nil), PostDecision{Value: json.RawMessage(`"w"`)},
			func(r *Result) bool { return !r.IsError && contentText(r) == "w" && string(r.Value) == `"w"` }},
		{"both", rawTool("t", `"v"`, nil), PostDecision{Content: []llm.Block{llm.TextBlock("X")}, Value: json.RawMessage(`"w"`)},
			func(r *Result) bool { return r.IsError && strings.Contains(r.Error.Message, "both content and value") }},
		{"value-on-failure", failingTool("t", errExploded), PostDecision{Value: json.RawMessage(`"w"`)},
			func(r *Result) bool {
				return r.IsError && strings.Contains(r.Error.Message, "value of a failed result")
			}},
	}
	for _, c := range cases {
		e := newEnv(t, Config{})
		e.register(e.g, c.tool)
		e.post(func(*Call) PostDecision { return c.decision })
		if r := e.exec("t", `{}`); !c.check(r) {
			t.Errorf("%s: got %+v", c.name, r)
		}
	}
	e := newEnv(t, Config{})
	tool := rawTool("t", `"v"`, nil)
	tool.Output.Schema = json.RawMessage(`{"type":"string"}`)
	e.register(e.g, tool)
	e.post(func(*Call) PostDecision { return PostDecision{Value: json.RawMessage(`1`)} })
	if r := e.exec("t", `{}`); code(r) != fault.CodeInvalidToolOutput {
		t.Fatalf("replacement value not re-validated: %+v", r)
	}
}

func TestScenario14_ContextOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	tool := rawTool("t", `"v"`, nil)
	tool.Execute = func(_ context.Context, x *Execution) (json.RawMessage, error) {
		x.DeferContext(userMsg("n1"))
		x.DeferContext(userMsg("n2"))
		return json.RawMessage(`"v"`), nil
	}
	e.register(e.g, tool)
	kernel.Listen(e.g, e.r.Hooks.Execute, func(ctx context.Context, x *Execution, next func(context.Context) (*Result, error)) (*Result, error) {
		x.DeferContext(userMsg("w"))
		return next(ctx)
	})
	kernel.Listen(e.g, e.r.Hooks.PostExecute, func(ctx context.Context, c *Call, next func(context.Context) (PostDecision, error)) (PostDecision, error) {
		return PostDecision{AdditionalContexts: []llm.Message{userMsg("p")}}, nil
	}, kernel.Prepend())
	if r := e.exec("t", `{}`); ctxIDs(r) != "n1,n2,w,p" {
		t.Fatalf("got %q", ctxIDs(r))
	}
}

func TestScenario15_PreAborted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	runs := 0
	e.register(e.g, echoTool(t, &runs))
	var c counters
	e.count(&c)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := e.r.Execute(ctx, Input{CallID: "c", Name: "echo", Args: json.RawMessage(`{"text":"x"}`)})
	if contentText(r) != "Error: tool call aborted before dispatch" || code(r) != fault.CodeAbortedBeforeDispatch {
		t.Fatalf("got %+v", r)
	}
	if c != (counters{results: 1}) || runs != 0 {
		t.Fatalf("stages ran: %+v runs=%d", c, runs)
	}
}

func TestScenario16_NonLosslessArgsBeatPreAbort(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, echoTool(t, nil))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := e.r.Execute(ctx, Input{CallID: "c", Name: "echo", Args: json.RawMessage(`{"text":`)})
	if contentText(r) != "Error: tool execution arguments must be losslessly JSON-serializable" || r.Error.Info != nil {
		t.Fatalf("got %+v", r)
	}
}

func TestScenario17_AbortAfterBodyStarted(t *testing.T) {
	t.Parallel()
	for _, throw := range []bool{false, true} {
		e := newEnv(t, Config{})
		ctx, cancel := context.WithCancel(context.Background())
		tool := rawTool("t", `"v"`, nil)
		tool.Execute = func(bctx context.Context, _ *Execution) (json.RawMessage, error) {
			cancel()
			<-bctx.Done()
			if throw {
				return nil, errExploded
			}
			return json.RawMessage(`"done"`), nil
		}
		e.register(e.g, tool)
		r := e.r.Execute(ctx, Input{CallID: "c", Name: "t", Args: json.RawMessage(`{}`)})
		if throw && contentText(r) != "Error: exploded" {
			t.Fatalf("own error not kept: %+v", r)
		}
		if !throw && (contentText(r) != "Error: tool call aborted" || code(r) != fault.CodeAborted) {
			t.Fatalf("got %+v", r)
		}
	}
}

func TestScenario18_TimeoutPolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	tool := rawTool("slow", `"v"`, nil)
	tool.TimeoutMs = 50
	tool.Execute = func(ctx context.Context, _ *Execution) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	e.register(e.g, tool)
	r := e.exec("slow", `{}`)
	if contentText(r) != "Error: tool call timed out after 50ms" || *r.ErrorInfo() != (fault.Info{Name: NameToolTimeout, Code: fault.CodeToolTimeout}) {
		t.Fatalf("got %+v", r)
	}
}

func TestScenario19_ExecutionMode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	mk := func(name string, safe func(json.RawMessage) bool) {
		tool := rawTool(name, `"v"`, nil)
		tool.IsConcurrencySafe = safe
		e.register(e.g, tool)
	}
	mk("yes", func(json.RawMessage) bool { return true })
	mk("none", nil)
	mk("panics", func(json.RawMessage) bool { panic("x") })
	mk("no", func(json.RawMessage) bool { return false })
	e.register(e.g, echoTool(t, nil))
	cases := []struct {
		name, args string
		want       Mode
	}{
		{"yes", `{}`, Parallel}, {"none", `{}`, Exclusive}, {"panics", `{}`, Exclusive}, {"no", `{}`, Exclusive},
		{"ghost", `{}`, Exclusive}, {"echo", `{"text":"a"}`, Parallel}, {"echo", `{"text":1}`, Exclusive},
		{"yes", `{`, Exclusive},
	}
	for _, c := range cases {
		if got := e.r.ExecutionMode(Input{Name: c.name, Args: json.RawMessage(c.args)}); got != c.want {
			t.Errorf("%s %s: got %v", c.name, c.args, got)
		}
	}
}

func TestScenario28_Restrict(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("read", `"r"`, nil))
	e.register(e.g, rawTool("bash", `"b"`, nil))
	a := e.scope("agent:a", "")
	e.register(a, rawTool("capture", `"c"`, nil))
	if _, err := e.r.Restrict(a, Restriction{Allow: []string{"read"}}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(e.r.Names("agent:a"), ","); got != "capture,read" {
		t.Fatalf("scope view %q", got)
	}
	if r := e.execIn("agent:a", "bash", `{}`); contentText(r) != `Error: unknown tool "bash"` {
		t.Fatalf("got %q", contentText(r))
	}
	if got := strings.Join(e.r.Names(""), ","); got != "bash,read" {
		t.Fatalf("global view %q", got)
	}
	if _, err := e.r.Restrict(a, Restriction{}); err == nil {
		t.Fatal("restrict({}) must throw")
	}
	_, err := e.r.Restrict(a, Restriction{Allow: []string{"ghost"}})
	if err == nil || !strings.Contains(err.Error(), `"ghost"`) || !strings.Contains(err.Error(), "known tools: bash, read") {
		t.Fatalf("got %v", err)
	}
}

func TestScenario29_ScopedShadowing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	a := e.scope("agent:a", "")
	e.scope("agent:b", "")
	e.register(a, rawTool("t", `"scoped"`, nil))
	e.register(e.g, rawTool("t", `"global"`, nil))
	if r := e.execIn("agent:a", "t", `{}`); contentText(r) != "scoped" {
		t.Fatalf("agent a: %q", contentText(r))
	}
	if r := e.execIn("agent:b", "t", `{}`); contentText(r) != "global" {
		t.Fatalf("agent b: %q", contentText(r))
	}
	if _, err := e.r.Register(a, rawTool("t", `1`, nil)); err == nil {
		t.Fatal("duplicate in the same layer must throw")
	}
}
