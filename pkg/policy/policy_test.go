package policy_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/policy"
	"github.com/dshd/dshd/pkg/registry"
)

// env is a registry with two tools, `sh` ({command}) and `echo` ({text}), registered globally,
// and a scope whose fiber the policies are installed on.
type env struct {
	t     *testing.T
	k     *kernel.Kernel
	r     *registry.Registry
	f     *kernel.Fiber // the preset's scope
	runs  atomic.Int32  // bodies run
	posts atomic.Int32  // results post-execute saw
}

const scope = "preset:p@1"

func newEnv(t *testing.T, cfg registry.Config) *env {
	t.Helper()
	e := &env{t: t, k: kernel.New(nil)}
	cfg.Scopes = e.k.Scopes()
	r, err := registry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.r = r
	g := e.k.Fiber("global", nil)
	type shArgs struct {
		Command any `json:"command,omitempty"`
	}
	sh, err := registry.Define(registry.DefineSpec[shArgs, string]{Name: "sh", Description: "run"},
		func(_ context.Context, x *registry.Execution, a shArgs) (string, error) {
			e.runs.Add(1)
			x.DeferContext(llm.NewUserMessage("body-ctx", "from the body"))
			return "ran", nil
		})
	if err != nil {
		t.Fatal(err)
	}
	type echoArgs struct {
		Text string `json:"text"`
	}
	echo, err := registry.Define(registry.DefineSpec[echoArgs, string]{Name: "echo", Description: "echo",
		PresentationMeta: func(a echoArgs, out string) (any, error) { return map[string]int{"len": len(out)}, nil }},
		func(_ context.Context, _ *registry.Execution, a echoArgs) (string, error) {
			e.runs.Add(1)
			return a.Text, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range []*registry.Tool{sh, echo} {
		if _, err := r.Register(g, tl); err != nil {
			t.Fatal(err)
		}
	}
	_, err = kernel.Listen(g, r.Hooks.PostExecute, kernel.WaterfallFunc[*registry.Call, registry.PostDecision](
		func(ctx context.Context, c *registry.Call, next func(context.Context) (registry.PostDecision, error)) (registry.PostDecision, error) {
			e.posts.Add(1)
			return next(ctx)
		}))
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.k.Scopes().Declare(scope, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.f = e.k.Fiber(scope, s)
	return e
}

// install compiles and installs a policies block given as JSON.
func (e *env) install(block string, envs ...policy.Env) {
	e.t.Helper()
	var p policy.Policies
	if err := json.Unmarshal([]byte(block), &p); err != nil {
		e.t.Fatal(err)
	}
	p.Normalize()
	var problems []string
	policy.Check(p, policy.Rules{WebhooksEnabled: true, AllowHTTP: true, AllowPrivate: true},
		func(field, format string, args ...any) { problems = append(problems, field) })
	if len(problems) > 0 {
		e.t.Fatalf("problems %v", problems)
	}
	set, err := policy.Compile(p)
	if err != nil {
		e.t.Fatal(err)
	}
	var pe policy.Env
	if len(envs) > 0 {
		pe = envs[0]
	}
	if err := set.Install(e.f, e.r, pe); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) exec(name, args string) *registry.Result {
	return e.execCtx(context.Background(), name, args)
}

func (e *env) execCtx(ctx context.Context, name, args string) *registry.Result {
	return e.r.Execute(ctx, registry.Input{CallID: "c1", Name: name, Args: json.RawMessage(args), Scope: scope,
		Agent: "agent-1", Location: registry.Location{Turn: 1, Step: 2}})
}

func text(res *registry.Result) string {
	if len(res.Content) != 1 || res.Content[0].Type != llm.BlockText {
		return "<not one text block>"
	}
	return res.Content[0].Text
}

// wantDenied checks the PIPE-5 / E1 denial: `Error: <reason>`, message reason, TOOL_DENIED.
func wantDenied(t *testing.T, res *registry.Result, reason string) {
	t.Helper()
	info := res.ErrorInfo()
	if !res.IsError || text(res) != "Error: "+reason || res.Error.Message != reason || info == nil ||
		*info != (fault.Info{Name: registry.NameToolDenied, Code: fault.CodeToolDenied}) {
		t.Fatalf("result %+v (error %+v), want the denial %q", res, res.Error, reason)
	}
}

func wantSuccess(t *testing.T, res *registry.Result, content string) {
	t.Helper()
	if res.IsError || text(res) != content {
		t.Fatalf("result %+v (error %+v), want success %q", res, res.Error, content)
	}
}

// TestPIPE5_PolicyDenyMatchingCommand: a pre-execute deny fits calls whose string argument
// matches its regexp; the result is the PIPE-5 failure with E1's code, the body does not run,
// and post-execute still sees it. A missing or non-string argument does not match.
func TestPIPE5_PolicyDenyMatchingCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, registry.Config{})
	e.install(`{"preExecute":[{"tools":["sh"],"match":{"command":"^rm "},"decision":"deny","reason":"rm is not allowed"}]}`)
	wantDenied(t, e.exec("sh", `{"command":"rm -rf /"}`), "rm is not allowed")
	if e.runs.Load() != 0 || e.posts.Load() != 1 {
		t.Fatalf("runs %d, posts %d; want 0 and 1", e.runs.Load(), e.posts.Load())
	}
	for _, args := range []string{`{"command":"ls -l"}`, `{"command":"xrm -f"}`, `{"command":42}`, `{"command":["rm x"]}`, `{}`} {
		wantSuccess(t, e.exec("sh", args), "ran")
	}
	wantSuccess(t, e.exec("echo", `{"text":"rm x"}`), "rm x") // another tool
	// Outside the preset's scope the rule does not apply.
	if res := e.r.Execute(context.Background(), registry.Input{CallID: "c", Name: "sh", Args: json.RawMessage(`{"command":"rm x"}`)}); res.IsError {
		t.Fatalf("unscoped call denied: %+v", res)
	}
}

// TestPIPE4_PolicyFirstFittingRuleDecides: rules are evaluated in order; an allow stops the
// evaluation; every regexp of a match must match; a deny without a reason gets the default.
func TestPIPE4_PolicyFirstFittingRuleDecides(t *testing.T) {
	t.Parallel()
	e := newEnv(t, registry.Config{})
	e.install(`{"preExecute":[
		{"tools":["echo"],"match":{"text":"^ok"},"decision":"allow"},
		{"tools":["echo","sh"],"match":{"text":"a","other":"b"},"decision":"deny","reason":"both"},
		{"tools":["*"],"decision":"deny"}]}`)
	wantSuccess(t, e.exec("echo", `{"text":"ok then"}`), "ok then")
	wantDenied(t, e.exec("echo", `{"text":"not ok"}`), `tool "echo" is denied by the preset's policy`)
	wantDenied(t, e.exec("sh", `{"command":"x"}`), `tool "sh" is denied by the preset's policy`)
	wantDenied(t, e.exec("echo", `{"text":"a","other":"b"}`), "both")
}

// TestAPR1_PolicyAskGoesThroughApproval: an ask rule resolves through the approval service:
// without one it is denied with its reason; allowed-once runs the body; rejected denies.
func TestAPR1_PolicyAskGoesThroughApproval(t *testing.T) {
	t.Parallel()
	e := newEnv(t, registry.Config{})
	e.install(`{"preExecute":[{"tools":["echo"],"decision":"ask","reason":"needs review"}]}`)
	wantDenied(t, e.exec("echo", `{"text":"x"}`), "needs review")
	var asked []registry.ApprovalRequest
	outcome := registry.OutcomeAllowedOnce
	e.r.MountApprover(registry.ApproverFunc(func(_ context.Context, req registry.ApprovalRequest) (string, error) {
		asked = append(asked, req)
		return outcome, nil
	}))
	wantSuccess(t, e.exec("echo", `{"text":"x"}`), "x")
	outcome = registry.OutcomeRejected
	res := e.exec("echo", `{"text":"x"}`)
	if text(res) != `Error: the user rejected tool "echo"` || res.ErrorInfo().Code != fault.CodeApprovalRejected {
		t.Fatalf("result %+v", res)
	}
	if len(asked) != 2 || asked[0].Reason != "needs review" || asked[0].ToolName != "echo" {
		t.Fatalf("asked %+v", asked)
	}
}

// TestGRD2_PolicyGuardBeatsAllow: a guard denies a fitting call with its reason even when a
// pre-execute rule, or a prepended pre-execute listener, allows it; the tool stays visible and
// calls outside the preset's scope are not guarded.
func TestGRD2_PolicyGuardBeatsAllow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, registry.Config{})
	e.install(`{"preExecute":[{"tools":["*"],"decision":"allow"}],
		"guards":[{"tools":["sh"],"match":{"command":"^sudo"},"reason":"no sudo"},{"tools":["echo"],"match":{"text":"secret"}}]}`)
	_, err := kernel.Listen(e.k.Fiber("plugin", nil), e.r.Hooks.PreExecute, kernel.WaterfallFunc[*registry.Execution, registry.Decision](
		func(context.Context, *registry.Execution, func(context.Context) (registry.Decision, error)) (registry.Decision, error) {
			return registry.Allow(), nil
		}), kernel.Prepend())
	if err != nil {
		t.Fatal(err)
	}
	wantDenied(t, e.exec("sh", `{"command":"sudo ls"}`), "no sudo")
	wantDenied(t, e.exec("echo", `{"text":"the secret"}`), `tool "echo" is blocked by the preset's guard`)
	if e.runs.Load() != 0 || e.posts.Load() != 2 {
		t.Fatalf("runs %d, posts %d", e.runs.Load(), e.posts.Load())
	}
	wantSuccess(t, e.exec("sh", `{"command":"ls"}`), "ran")
	if names := e.r.Names(scope); !slices.Contains(names, "sh") || !slices.Contains(names, "echo") {
		t.Fatalf("visible tools %v", names)
	}
	if res := e.r.Execute(context.Background(), registry.Input{CallID: "c", Name: "sh", Args: json.RawMessage(`{"command":"sudo ls"}`)}); res.IsError {
		t.Fatalf("unscoped call guarded: %+v", res)
	}
}

// TestPIPE15_PolicyBlockFeedbackIsContent: a block turns the result into a failure whose content
// is the feedback and whose message is its text, without info; the contexts the tool deferred
// are dropped and those of earlier addContext rules kept.
func TestPIPE15_PolicyBlockFeedbackIsContent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, registry.Config{})
	e.install(`{"postExecute":[
		{"tools":["sh"],"action":"addContext","context":"the output was withheld"},
		{"tools":["sh"],"match":{"command":"cat"},"action":"block","feedback":"output withheld by policy"}]}`)
	res := e.exec("sh", `{"command":"cat /etc/shadow"}`)
	if !res.IsError || text(res) != "output withheld by policy" || res.Error.Message != "output withheld by policy" ||
		res.Error.Info != nil || res.Value != nil {
		t.Fatalf("result %+v (error %+v)", res, res.Error)
	}
	if len(res.AdditionalContexts) != 1 || res.AdditionalContexts[0].Text() != "the output was withheld" {
		t.Fatalf("contexts %+v", res.AdditionalContexts)
	}
	// Not fitting the block: accepted, with the tool's context first and the rule's after.
	res = e.exec("sh", `{"command":"ls"}`)
	wantSuccess(t, res, "ran")
	if len(res.AdditionalContexts) != 2 || res.AdditionalContexts[0].ID != "body-ctx" ||
		res.AdditionalContexts[1].Text() != "the output was withheld" {
		t.Fatalf("contexts %+v", res.AdditionalContexts)
	}
}

// TestPIPE15_PolicyReplaceKeepsValue: a replace changes the content only: value and meta stay,
// and a failure stays a failure.
func TestPIPE15_PolicyReplaceKeepsValue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, registry.Config{})
	e.install(`{"preExecute":[{"tools":["echo"],"match":{"text":"^no"},"decision":"deny","reason":"no"}],
		"postExecute":[{"tools":["echo"],"action":"replace","content":"[redacted]"}]}`)
	res := e.exec("echo", `{"text":"hello"}`)
	wantSuccess(t, res, "[redacted]")
	if string(res.Value) != `"hello"` || string(res.Meta) != `{"len":5}` {
		t.Fatalf("value %s meta %s", res.Value, res.Meta)
	}
	res = e.exec("echo", `{"text":"no"}`)
	if !res.IsError || text(res) != "[redacted]" || res.Error.Message != "no" {
		t.Fatalf("result %+v", res)
	}
}

// TestLOOP6_PolicyAddContextAfterToolContexts: addContext rules add user messages after the
// tool's own contexts, every fitting one in order.
func TestLOOP6_PolicyAddContextAfterToolContexts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, registry.Config{})
	e.install(`{"postExecute":[{"tools":["*"],"action":"addContext","context":"one"},
		{"tools":["sh"],"match":{"command":"x"},"action":"addContext","context":"two"}]}`)
	res := e.exec("sh", `{"command":"x"}`)
	var got []string
	for _, m := range res.AdditionalContexts {
		if m.Role != llm.RoleUser || m.Validate() != nil {
			t.Fatalf("context %+v", m)
		}
		got = append(got, m.Text())
	}
	if !slices.Equal(got, []string{"from the body", "one", "two"}) {
		t.Fatalf("contexts %q", got)
	}
}
