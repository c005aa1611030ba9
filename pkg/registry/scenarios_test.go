package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
)

func TestScenario01_EchoSuccessAndFrozenObserver(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, echoTool(t, nil))
	var seen *Result
	kernel.Listen(e.g, e.r.Hooks.Result, func(_ context.Context, c *Call) error { seen = c.Result; return nil })
	r := e.exec("echo", `{"text":"hi"}`)
	if r.IsError || string(r.Value) != `"hi"` || len(r.Content) != 1 || r.Content[0].Type != llm.BlockText || r.Content[0].Text != "hi" {
		t.Fatalf("got %+v", r)
	}
	if seen != r {
		t.Fatal("tools/result observer did not see the returned result")
	}
}

func TestScenario02_UnknownTool(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	var c counters
	e.count(&c)
	r := e.exec("nope", `{}`)
	if contentText(r) != `Error: unknown tool "nope"` || *r.ErrorInfo() != (fault.Info{Name: NameToolNotFound, Code: fault.CodeUnknownTool}) {
		t.Fatalf("got %+v", r)
	}
	if c.pre != 1 || c.post != 1 {
		t.Fatalf("pre-execute and post-execute must see the call: %+v", c)
	}
}

func TestScenario03_ThrownErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, failingTool("plain", errExploded))
	e.register(e.g, failingTool("harness", NewError("HarnessError", "ENOSPC", "disk full")))
	r := e.exec("plain", `{}`)
	if contentText(r) != "Error: exploded" || r.Error.Message != "exploded" || r.Error.Info != nil {
		t.Fatalf("plain: %+v", r)
	}
	r = e.exec("harness", `{}`)
	if *r.ErrorInfo() != (fault.Info{Name: "HarnessError", Code: "ENOSPC"}) {
		t.Fatalf("harness: %+v", r.Error)
	}
}

type pathArgs struct {
	Path string `json:"path"`
}

func TestScenario04_MissingRequiredArgument(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	runs := 0
	tool, err := Define(DefineSpec[pathArgs, string]{Name: "read"}, func(context.Context, *Execution, pathArgs) (string, error) {
		runs++
		return "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.register(e.g, tool)
	r := e.exec("read", `{}`)
	if contentText(r) != `Error: invalid arguments: missing required property "path"` || code(r) != fault.CodeInvalidArgs || runs != 0 {
		t.Fatalf("got %+v runs=%d", r, runs)
	}
}

type tableArgs struct {
	S     string   `json:"s,omitempty"`
	Color string   `json:"color,omitempty" jsonschema:"enum=red,enum=green"`
	Tags  []string `json:"tags,omitempty"`
	N     int      `json:"n,omitempty" jsonschema:"default=7"`
}

func TestScenario05_ValidationTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	var got tableArgs
	tool, err := Define(DefineSpec[tableArgs, string]{Name: "t"}, func(_ context.Context, _ *Execution, a tableArgs) (string, error) {
		got = a
		return "ok", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.register(e.g, tool)
	cases := map[string]string{
		`{"s":1}`:          `Error: invalid arguments: "s" must be a string`,
		`{"color":"blue"}`: `Error: invalid arguments: "color" must be one of ["red","green"]`,
		`{"tags":["a",2]}`: `Error: invalid arguments: "tags[1]" must be a string`,
		`{"extra":true}`:   "ok",
	}
	for in, want := range cases {
		if r := e.exec("t", in); contentText(r) != want {
			t.Errorf("%s: got %q want %q", in, contentText(r), want)
		}
	}
	if got.N != 0 {
		t.Fatalf("default applied: %d", got.N)
	}
}

func TestScenario06_PreExecuteDeny(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	runs := 0
	e.register(e.g, echoTool(t, &runs))
	e.pre(e.g, Deny("denied by policy"))
	var postSaw *Result
	e.post(func(c *Call) PostDecision { postSaw = c.Result; return PostDecision{} })
	r := e.exec("echo", `{"text":"x"}`)
	if contentText(r) != "Error: denied by policy" || runs != 0 || postSaw == nil || !postSaw.IsError {
		t.Fatalf("got %+v runs=%d post=%v", r, runs, postSaw)
	}
	if *r.ErrorInfo() != (fault.Info{Name: NameToolDenied, Code: fault.CodeToolDenied}) {
		t.Fatalf("E1 code missing: %+v", r.Error)
	}
}

func TestScenario07_AskWithoutApprovalService(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, echoTool(t, nil))
	f := e.k.Fiber("p", nil)
	e.pre(f, Ask("needs approval"))
	if r := e.exec("echo", `{"text":"x"}`); contentText(r) != "Error: needs approval" {
		t.Fatalf("got %q", contentText(r))
	}
	f.Dispose()
	e.pre(e.g, Ask(""))
	if r := e.exec("echo", `{"text":"x"}`); contentText(r) != `Error: tool "echo" requires approval (not yet supported)` {
		t.Fatalf("got %q", contentText(r))
	}
}

// TestAPR1_ApproverPassesOn: an approver that returns ErrNoApprovalService (wrapped) for a call
// leaves it as without an approval service: denied (post-result) with the ask's reason or the
// default one, {ToolDeniedError, TOOL_DENIED}, the body not run.
func TestAPR1_ApproverPassesOn(t *testing.T) {
	t.Parallel()
	for reason, want := range map[string]string{
		"":    `Error: tool "echo" requires approval (not yet supported)`,
		"why": "Error: why",
	} {
		e := newEnv(t, Config{})
		runs := 0
		e.register(e.g, echoTool(t, &runs))
		e.pre(e.g, Ask(reason))
		e.r.MountApprover(ApproverFunc(func(context.Context, ApprovalRequest) (string, error) {
			return "", fmt.Errorf("agent a: %w", ErrNoApprovalService)
		}))
		p := e.r.Prepare(e.ctx, Input{CallID: "c", Name: "echo", Args: json.RawMessage(`{"text":"x"}`), Agent: "a"})
		r := e.r.Finish(e.ctx, p)
		if p.Kind != PrepPostResult || contentText(r) != want || runs != 0 {
			t.Errorf("reason %q: %v %q runs=%d", reason, p.Kind, contentText(r), runs)
		}
		if *r.ErrorInfo() != (fault.Info{Name: NameToolDenied, Code: fault.CodeToolDenied}) {
			t.Errorf("reason %q: info %+v", reason, r.ErrorInfo())
		}
	}
}

func TestScenario08_ApprovalOutcomes(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		OutcomeAllowedOnce: "x",
		OutcomeRejected:    `Error: the user rejected tool "echo"`,
		OutcomeUnavailable: `Error: tool "echo" requires approval, but no approval channel is available`,
		OutcomeCancelled:   `Error: approval for tool "echo" was cancelled`,
	}
	for outcome, want := range cases {
		e := newEnv(t, Config{})
		var asked []ApprovalRequest
		e.r.MountApprover(ApproverFunc(func(_ context.Context, req ApprovalRequest) (string, error) {
			asked = append(asked, req)
			return outcome, nil
		}))
		e.register(e.g, echoTool(t, nil))
		e.pre(e.g, Ask("why"))
		r := e.r.Execute(e.ctx, Input{CallID: "c9", Name: "echo", Args: json.RawMessage(`{"text":"x"}`), Agent: "a1"})
		if contentText(r) != want {
			t.Errorf("%s: got %q", outcome, contentText(r))
		}
		if len(asked) == 1 {
			if asked[0].Exec == nil || asked[0].Exec.CallID != "c9" {
				t.Errorf("%s: the request lacks the waiting execution", outcome)
			}
			asked[0].Exec = nil
		}
		if len(asked) != 1 || asked[0] != (ApprovalRequest{Agent: "a1", ToolName: "echo", CallID: "c9", Reason: "why"}) {
			t.Errorf("%s: request %+v", outcome, asked)
		}
	}
}

func TestScenario10_CancelWhileApprovalPending(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	waiting := make(chan struct{})
	e.r.MountApprover(ApproverFunc(func(ctx context.Context, _ ApprovalRequest) (string, error) {
		close(waiting)
		<-ctx.Done()
		return OutcomeCancelled, nil
	}))
	e.register(e.g, echoTool(t, nil))
	e.pre(e.g, Ask("why"))
	go func() { <-waiting; cancel() }()
	r := e.r.Execute(ctx, Input{CallID: "c", Name: "echo", Args: json.RawMessage(`{"text":"x"}`), Agent: "a"})
	if code(r) != fault.CodeAbortedBeforeDispatch {
		t.Fatalf("got %+v", r)
	}
}

func TestScenario11_GuardsAreMonotonic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	runs := 0
	e.register(e.g, echoTool(t, &runs))
	e.r.Guard(e.g, func(*Execution) string { return "" })
	g2, _ := e.r.Guard(e.g, func(*Execution) string { return "global denial" })
	if r := e.exec("echo", `{"text":"x"}`); contentText(r) != "Error: global denial" || runs != 0 {
		t.Fatalf("got %q runs=%d", contentText(r), runs)
	}
	g2()
	a := e.scope("agent:a", "")
	e.scope("agent:b", "")
	e.r.Guard(a, func(*Execution) string { return "scoped denial" })
	e.pre(e.g, Allow(), kernel.Prepend())
	if r := e.execIn("agent:a", "echo", `{"text":"x"}`); contentText(r) != "Error: scoped denial" {
		t.Fatalf("agent a: %q", contentText(r))
	}
	if r := e.execIn("agent:b", "echo", `{"text":"x"}`); r.IsError {
		t.Fatalf("agent b: %q", contentText(r))
	}
}

func TestScenario12_PostExecuteBlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	tool := rawTool("t", `"v"`, nil)
	tool.Execute = func(_ context.Context, x *Execution) (json.RawMessage, error) {
		x.DeferContext(userMsg("deferred"))
		return json.RawMessage(`"v"`), nil
	}
	e.register(e.g, tool)
	e.post(func(*Call) PostDecision {
		return PostDecision{Kind: PostBlock, Feedback: []llm.Block{llm.TextBlock("blocked")}, AdditionalContexts: []llm.Message{userMsg("own")}}
	})
	r := e.exec("t", `{}`)
	if !r.IsError || contentText(r) != "blocked" || r.Error.Message != "blocked" || ctxIDs(r) != "own" || r.Value != nil {
		t.Fatalf("got %+v", r)
	}
}
