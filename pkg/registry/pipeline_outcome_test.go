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

func TestPIPE14_CancelOverrideKeepsContextsAndFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	ok := rawTool("ok", `1`, nil)
	ok.Execute = func(_ context.Context, x *Execution) (json.RawMessage, error) {
		x.DeferContext(userMsg("kept"))
		cancel()
		return json.RawMessage(`1`), nil
	}
	e.register(e.g, ok)
	r := e.r.Execute(ctx, Input{CallID: "c", Name: "ok", Args: json.RawMessage(`{}`)})
	if code(r) != fault.CodeAborted || ctxIDs(r) != "kept" {
		t.Fatalf("got %+v", r)
	}
	// A wrapper that skips the body: success after an abort is ABORTED_BEFORE_DISPATCH.
	e2 := newEnv(t, Config{})
	e2.register(e2.g, rawTool("t", `1`, nil))
	ctx2, cancel2 := context.WithCancel(context.Background())
	kernel.Listen(e2.g, e2.r.Hooks.Execute, func(context.Context, *Execution, func(context.Context) (*Result, error)) (*Result, error) {
		cancel2()
		return &Result{Value: json.RawMessage(`1`)}, nil
	})
	if r := e2.r.Execute(ctx2, Input{CallID: "c", Name: "t", Args: json.RawMessage(`{}`)}); code(r) != fault.CodeAbortedBeforeDispatch {
		t.Fatalf("got %+v", r)
	}
}

func TestPIPE15_BlockMessages(t *testing.T) {
	t.Parallel()
	cases := []struct {
		feedback []llm.Block
		want     string
	}{
		{[]llm.Block{llm.TextBlock("a"), {Type: llm.BlockImage, MediaType: "image/png", Data: "x"}, llm.TextBlock("b")}, "a\n[image content]\nb"},
		{[]llm.Block{{Type: llm.BlockImage, MediaType: "image/png", Data: "x"}}, msgBlockedDefault},
		{nil, msgBlockedDefault},
	}
	for _, c := range cases {
		if got := blocked(PostDecision{Kind: PostBlock, Feedback: c.feedback}); got.Error.Message != c.want || !got.IsError {
			t.Errorf("got %q want %q", got.Error.Message, c.want)
		}
	}
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("t", `1`, nil))
	kernel.Listen(e.g, e.r.Hooks.PostExecute, func(context.Context, *Call, func(context.Context) (PostDecision, error)) (PostDecision, error) {
		return PostDecision{}, errors.New("post broke")
	})
	if r := e.exec("t", `{}`); contentText(r) != "Error: post broke" {
		t.Fatalf("got %+v", r)
	}
}

func TestPIPE16_CancelOverrideAfterPostExecute(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("t", `1`, nil))
	ctx, cancel := context.WithCancel(context.Background())
	e.post(func(*Call) PostDecision { cancel(); return PostDecision{} })
	if r := e.r.Execute(ctx, Input{CallID: "c", Name: "t", Args: json.RawMessage(`{}`)}); code(r) != fault.CodeAborted {
		t.Fatalf("got %+v", r)
	}
}

func TestPIPE17_FinalizeContentOnEveryOutcomeOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	calls := 0
	tool := failingTool("t", errExploded)
	tool.FinalizeContent = func(_ *Execution, r *Result) ([]llm.Block, error) {
		calls++
		return []llm.Block{llm.TextBlock("final:" + contentText(r))}, nil
	}
	e.register(e.g, tool)
	if r := e.exec("t", `{}`); contentText(r) != "final:Error: exploded" || calls != 1 {
		t.Fatalf("got %q calls=%d", contentText(r), calls)
	}
	if r := e.exec("t", `{`); contentText(r) != "final:Error: "+msgArgsNotLossless || calls != 2 {
		t.Fatalf("args failure: %q", contentText(r))
	}
	e2 := newEnv(t, Config{})
	boom := rawTool("b", `1`, nil)
	n := 0
	boom.FinalizeContent = func(*Execution, *Result) ([]llm.Block, error) { n++; return nil, errors.New("fin broke") }
	e2.register(e2.g, boom)
	if r := e2.exec("b", `{}`); !r.IsError || !strings.Contains(r.Error.Message, "fin broke") || n != 1 {
		t.Fatalf("got %+v n=%d", r, n)
	}
}

func TestPIPE18_MutationsAttachedLast(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	tool := rawTool("t", `1`, nil)
	tool.Execute = func(_ context.Context, x *Execution) (json.RawMessage, error) {
		x.RecordFileMutation(FileMutation{Path: "a.txt"})
		x.RecordFileMutation(FileMutation{Path: "b.txt"})
		return json.RawMessage(`1`), nil
	}
	e.register(e.g, tool)
	e.post(func(*Call) PostDecision {
		return PostDecision{Kind: PostBlock, Feedback: []llm.Block{llm.TextBlock("no")}}
	})
	r := e.exec("t", `{}`)
	if len(r.Mutations) != 2 || r.Mutations[0].CommitOrder != 1 || r.Mutations[1].CommitOrder != 2 || r.Mutations[0].Version != 1 {
		t.Fatalf("got %+v", r.Mutations)
	}
}

func TestPIPE19_ResultNotifiedOnceContained(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("t", `1`, nil))
	n := 0
	kernel.Listen(e.g, e.r.Hooks.Result, func(context.Context, *Call) error { panic("observer") })
	kernel.Listen(e.g, e.r.Hooks.Result, func(_ context.Context, c *Call) error { n++; return errors.New("x") })
	r := e.exec("t", `{}`)
	if r.IsError || n != 1 {
		t.Fatalf("got %+v n=%d", r, n)
	}
}

func TestPIPE20_RegistryNeverAppendsToTheLog(t *testing.T) {
	t.Parallel()
	// The registry has no log dependency at all: its only outputs are the returned result and
	// the tools/result notification, fired exactly once per call.
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("t", `1`, nil))
	var c counters
	e.count(&c)
	e.exec("t", `{}`)
	e.exec("nope", `{}`)
	if c.results != 2 {
		t.Fatalf("got %+v", c)
	}
}

func TestGRD1_GuardOrderGlobalThenFarthestToNearest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("t", `1`, nil))
	p := e.scope("preset:p", "")
	a := e.scope("agent:a", "preset:p")
	var order []string
	g := func(f *kernel.Fiber, name string) {
		e.r.Guard(f, func(*Execution) string { order = append(order, name); return "" })
	}
	g(a, "agent")
	g(p, "preset")
	g(e.g, "global1")
	g(e.g, "global2")
	e.execIn("agent:a", "t", `{}`)
	if got := strings.Join(order, ","); got != "global1,global2,preset,agent" {
		t.Fatalf("got %s", got)
	}
	order = nil
	e.pre(e.g, Deny("x"))
	e.execIn("agent:a", "t", `{}`)
	if len(order) != 0 {
		t.Fatal("guards ran after a deny")
	}
}

func TestGRD2_GuardBeatsAllow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("t", `1`, nil))
	e.r.Guard(e.g, func(*Execution) string { return "never" })
	e.pre(e.g, Allow(), kernel.Prepend())
	r := e.exec("t", `{}`)
	if contentText(r) != "Error: never" || *r.ErrorInfo() != (fault.Info{Name: NameToolDenied, Code: fault.CodeToolDenied}) {
		t.Fatalf("got %+v", r)
	}
}

func TestGRD3_ThrowingGuardIsFinal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("t", `1`, nil))
	e.r.Guard(e.g, func(*Execution) string { panic("guard broke") })
	p := e.r.Prepare(e.ctx, Input{CallID: "c", Name: "t", Args: json.RawMessage(`{}`)})
	if p.Kind != PrepFinalResult || !strings.Contains(p.Result().Error.Message, "guard broke") {
		t.Fatalf("got %v %+v", p.Kind, p.Result())
	}
}

func TestE1_DenialCodes(t *testing.T) {
	t.Parallel()
	cases := map[string]fault.Info{
		OutcomeRejected:    {Name: NameApprovalRejected, Code: fault.CodeApprovalRejected},
		OutcomeCancelled:   {Name: NameApprovalCancelled, Code: fault.CodeApprovalCancelled},
		OutcomeUnavailable: {Name: NameToolDenied, Code: fault.CodeToolDenied},
	}
	for outcome, want := range cases {
		e := newEnv(t, Config{Approver: ApproverFunc(func(context.Context, ApprovalRequest) (string, error) { return outcome, nil })})
		e.register(e.g, rawTool("t", `1`, nil))
		e.pre(e.g, Ask(""))
		r := e.r.Execute(e.ctx, Input{CallID: "c", Name: "t", Args: json.RawMessage(`{}`), Agent: "a"})
		if *r.ErrorInfo() != want || !strings.HasPrefix(contentText(r), "Error: ") {
			t.Errorf("%s: %+v", outcome, r.Error)
		}
	}
	e := newEnv(t, Config{Approver: ApproverFunc(func(context.Context, ApprovalRequest) (string, error) { return OutcomeAllowedOnce, nil })})
	e.register(e.g, rawTool("t", `1`, nil))
	e.pre(e.g, Ask(""))
	if r := e.exec("t", `{}`); contentText(r) != `Error: tool "t" requires approval, but the call has no agent to route it through` {
		t.Fatalf("no agent: %q", contentText(r))
	}
}

func TestE2_DefaultTimeoutFromConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{DefaultTimeoutMs: 20})
	tool := rawTool("t", `1`, nil)
	tool.Execute = func(ctx context.Context, _ *Execution) (json.RawMessage, error) {
		<-ctx.Done()
		return json.RawMessage(`1`), nil
	}
	e.register(e.g, tool)
	if r := e.exec("t", `{}`); contentText(r) != "Error: tool call timed out after 20ms" || code(r) != fault.CodeToolTimeout {
		t.Fatalf("got %+v", r)
	}
	if _, err := New(Config{DefaultTimeoutMs: -5}); err == nil {
		t.Fatal("negative default accepted")
	}
}
