package codemode_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/codemode"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/registry"
)

func TestScenario30_CodeModePrompt(t *testing.T) {
	t.Parallel()
	a := newAgents(t, newRuntime(t, codemode.Config{}))
	p := presetIn(t, "code", "")
	p.Body.Prompt.Sections = []preset.Section{{Name: "tool:echo", Order: new(100.0), Text: "Use echo to repeat text."}}
	res, err := prompt(t, a, p)
	if err != nil {
		t.Fatal(err)
	}
	if toolNames(res.Tools) != "run_code" {
		t.Fatalf("wire tools = %s", toolNames(res.Tools))
	}
	if got := sectionNames(res.Sections); got != "harness:identity,tools:code-only,tool:echo,tools:sdk" {
		t.Fatalf("sections = %s", got)
	}
	sdk := res.Sections[3].Text
	if !strings.Contains(sdk, "declare const tools") || !strings.Contains(sdk, "echo") || strings.Contains(sdk, "run_code:") {
		t.Fatalf("tools:sdk:\n%s", sdk)
	}
	res, err = prompt(t, a, presetIn(t, "both", ""))
	if err != nil {
		t.Fatal(err)
	}
	if toolNames(res.Tools) != "echo,fail,run_code,sleep,todo_write,wait" {
		t.Fatalf("both: wire tools = %s", toolNames(res.Tools))
	}
}

func TestScenario31_DirectCallUnderCodeCollapses(t *testing.T) {
	t.Parallel()
	for _, m := range []registry.PresentMode{registry.ModeCode, registry.ModeBoth} {
		ran := 0
		write := rawTool("write", "Write a file.", "", "")
		write.Execute = func(context.Context, *registry.Execution) (json.RawMessage, error) {
			ran++
			return json.RawMessage(`"written"`), nil
		}
		fx := newFixture(t, m, codemode.Config{}, write)
		res := fx.reg.Execute(context.Background(), registry.Input{CallID: "w1", Name: "write", Args: json.RawMessage(`{}`), Scope: agentScope})
		if m == registry.ModeCode && (res.ErrorInfo() == nil || res.ErrorInfo().Code != fault.CodeUnknownTool ||
			!strings.Contains(res.Error.Message, "from inside a `run_code` program") || ran != 0) {
			t.Fatalf("code: %q, body ran %d", text(res.Content), ran)
		}
		if m == registry.ModeBoth && (res.IsError || ran != 1) {
			t.Fatalf("both: %q, body ran %d", text(res.Content), ran)
		}
	}
}

func TestScenario32_RunCodeThroughTheAgentLoop(t *testing.T) {
	t.Parallel()
	a := newAgents(t, newRuntime(t, codemode.Config{}))
	evs := serve(t, a, presetIn(t, "code", ""), runCodeScript(
		`const one = await tools.echo({text: "echo:one"});
console.log("saw " + one);
return await tools.echo({text: "echo:two"});`))
	var types, subIDs []string
	var resultText string
	for _, ev := range evs {
		types = append(types, ev.Type)
		switch ev.Type {
		case eventlog.TypeToolCodeDispatch:
			d, err := eventlog.Decode[eventlog.CodeDispatch](ev)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"echo:one", "echo:two"}[len(subIDs)%2]
			subIDs = append(subIDs, d.SubCallID)
			if d.Name != "echo" || d.IsError || string(d.Arguments) != `{"text":"`+want+`"}` || d.RootCallID == "" ||
				text(d.Content) != want {
				t.Fatalf("code-dispatch = %+v", d)
			}
		case eventlog.TypeToolResult:
			r, err := eventlog.Decode[eventlog.ToolResult](ev)
			if err != nil {
				t.Fatal(err)
			}
			resultText = text(r.Message.Content[0].Content)
		}
	}
	if resultText != "saw echo:one\necho:two" {
		t.Fatalf("tool/result = %q; log %v", resultText, types)
	}
	calls := 0
	var callID string
	for _, ev := range evs {
		if ev.Type == eventlog.TypeToolCall {
			c, _ := eventlog.Decode[eventlog.ToolCall](ev)
			calls++
			callID = c.CallID
		}
	}
	if calls != 1 || strings.Join(subIDs, ",") != callID+":code:1,"+callID+":code:2" {
		t.Fatalf("%d tool/call events (want only run_code's), sub-calls %v", calls, subIDs)
	}
	want := []string{"tool/call", "tool/code-dispatch-start", "tool/code-dispatch", "tool/code-dispatch-start", "tool/code-dispatch", "tool/result"}
	if !subsequence(types, want) {
		t.Fatalf("log %v lacks %v", types, want)
	}
	msgs, err := eventlog.DeriveMessages(evs)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		for _, b := range m.Content {
			if b.Type == llm.BlockToolCall && b.Name != "run_code" {
				t.Fatalf("derived history names a sub-call: %+v", b)
			}
		}
	}
}

func subsequence(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

func TestScenario33_SubCallConcurrency(t *testing.T) {
	t.Parallel()
	g := newGate()
	fx := newFixtureCap(t, registry.ModeCode, codemode.Config{}, func(string) int { return 2 },
		g.tool(t, "excl", false), g.tool(t, "par", true))
	done := make(chan *registry.Result, 1)
	go func() {
		done <- fx.run(context.Background(), `await Promise.all([tools.excl({text: "1"}), tools.excl({text: "2"}), tools.excl({text: "3"})]);
			return (await Promise.all(["a", "b", "c", "d"].map(text => tools.par({text})))).join("");`)
	}()
	for _, want := range []string{"1", "2", "3"} {
		if s := <-g.started; s != want {
			t.Fatalf("started %s, want %s", s, want)
		}
		g.release <- struct{}{}
	}
	<-g.started
	<-g.started
	g.wantNoStart(t, "beyond maxParallelSubCalls 2")
	for range 4 {
		g.release <- struct{}{}
	}
	if res := <-done; text(res.Content) != "abcd" || g.maxRunning() != 2 {
		t.Fatalf("%q, max in flight %d", text(res.Content), g.maxRunning())
	}
}

func TestScenario34_DeniedSubCallAndTimeoutWithCapturedOutput(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, registry.ModeCode, codemode.Config{WallTimeout: 200 * time.Millisecond})
	if _, err := kernel.Listen(fx.f, fx.reg.Hooks.PreExecute, kernel.WaterfallFunc[*registry.Execution, registry.Decision](
		func(ctx context.Context, e *registry.Execution, next func(context.Context) (registry.Decision, error)) (registry.Decision, error) {
			if e.Name == "echo" {
				return registry.Deny("echo is off today"), nil
			}
			return next(ctx)
		})); err != nil {
		t.Fatal(err)
	}
	res := fx.run(context.Background(), `
		try { await tools.echo({text: "x"}); } catch (e) { console.log(e.toolName + ": " + e.message); }
		return "continued";`)
	if text(res.Content) != "echo: echo is off today\ncontinued" {
		t.Fatalf("deny: %q", text(res.Content))
	}
	res = fx.run(context.Background(), `console.log("got this far"); await tools.sleep({ms: 10000});`)
	if !res.IsError || res.ErrorInfo() == nil || res.ErrorInfo().Code != "CODE_RUN_FAILED" ||
		!strings.HasPrefix(text(res.Content), "Error: code run failed (timeout): ") ||
		!strings.HasSuffix(text(res.Content), "\nCaptured output:\ngot this far") {
		t.Fatalf("timeout: %q %+v", text(res.Content), res.ErrorInfo())
	}
}

func TestScenario35_OuterAbortStopsTheProgramAndItsSubCalls(t *testing.T) {
	t.Parallel()
	g := newGate()
	fx := newFixture(t, registry.ModeCode, codemode.Config{}, g.tool(t, "excl", false))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *registry.Result, 1)
	go func() {
		done <- fx.run(ctx, `await Promise.all([tools.excl({text: "in flight"}), tools.echo({text: "queued"})]);`)
	}()
	<-g.started
	cancel()
	res := <-done
	if g.aborted.Load() != 1 {
		t.Fatal("the in-flight sub-body did not see its signal abort")
	}
	if got := strings.Join(fx.dispatches(), ","); got != "start c1:code:1,done c1:code:1" {
		t.Fatalf("log %s: the queued call must be neither started nor logged", got)
	}
	if !res.IsError || !strings.HasPrefix(res.Error.Message, "code run failed (abort): ") {
		// PIPE-14 keeps failures: the outcome is the run's own abort failure.
		t.Fatalf("outcome %q", text(res.Content))
	}
}
