package codemode_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/codemode"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
)

func TestCODE1_RunCodeParametersAndDescription(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, registry.ModeCode, codemode.Config{})
	s := fx.rt.Schema()
	var params struct {
		Type       string `json:"type"`
		Properties map[string]struct {
			Type        string `json:"type"`
			Description string `json:"description"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(s.Parameters, &params); err != nil {
		t.Fatal(err)
	}
	if s.Name != "run_code" || params.Type != "object" || strings.Join(params.Required, ",") != "code,description" ||
		params.Properties["code"].Type != "string" || params.Properties["description"].Type != "string" {
		t.Fatalf("schema = %s %s", s.Name, s.Parameters)
	}
	if !strings.Contains(s.Description, "TypeScript") || !strings.Contains(params.Properties["code"].Description, "TypeScript") {
		t.Fatalf("the wording must follow the runtime language: %q", s.Description)
	}
	if fx.rt.Language() != "typescript" {
		t.Fatalf("Language = %q", fx.rt.Language())
	}
	for _, args := range []string{`{"code":"return 1","description":"   "}`, `{"code":"return 1"}`, `{"code":"return 1","description":7}`} {
		res := fx.reg.Execute(context.Background(), registry.Input{CallID: "c1", Name: "run_code", Args: json.RawMessage(args), Scope: agentScope})
		if !res.IsError || res.Error.Message != "invalid description: expected a non-empty string" ||
			text(res.Content) != "Error: invalid description: expected a non-empty string" {
			t.Fatalf("%s: %+v", args, res.Error)
		}
	}
	for _, lang := range []string{"python", "ruby"} {
		if _, err := codemode.New(codemode.Config{Language: lang}); err == nil {
			t.Fatalf("language %q must fail loudly", lang)
		}
	}
	if _, err := codemode.New(codemode.Config{MaxToolCalls: -1}); err == nil {
		t.Fatal("a negative limit must be rejected")
	}
}

func TestCODE2_RunCodeIsExclusive(t *testing.T) {
	t.Parallel()
	for _, m := range []registry.PresentMode{registry.ModeCode, registry.ModeBoth} {
		fx := newFixture(t, m, codemode.Config{})
		if got := fx.reg.ExecutionMode(fx.input("c1", "return 1")); got != registry.Exclusive {
			t.Fatalf("%s: run_code is %v", m, got)
		}
		tl, _ := fx.reg.Get("run_code", agentScope)
		if tl.IsConcurrencySafe != nil {
			t.Fatal("run_code must have no concurrency classifier")
		}
	}
}

func TestCODE4_ProgramSeesTheToolsGlobal(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, registry.ModeCode, codemode.Config{},
		rawTool("__proto__", "A tool with an awkward name.", "", ""), rawTool("my-tool", "Dashed.", "", ""))
	v := mustValue(t, fx.run(context.Background(), `
		const names = Object.keys(tools);
		const proto = await tools["__proto__"]({});
		const dashed = await tools["my-tool"]({});
		return {names, proto, dashed, own: Object.prototype.hasOwnProperty.call(tools, "__proto__"),
			err: typeof ToolCallError, isErr: new ToolCallError("x", "y") instanceof Error};`))
	want := `{"names":["__proto__","echo","my-tool","sleep"],"proto":null,"dashed":null,"own":true,"err":"function","isErr":true}`
	if string(v.Result) != want {
		t.Fatalf("result = %s, want %s", v.Result, want)
	}
	v = mustValue(t, fx.run(context.Background(), `
		try { await tools.sleep({ms: "soon"}); } catch (e) {
			return {name: e.name, toolName: e.toolName, message: e.message, isTCE: e instanceof ToolCallError};
		}`))
	want = `{"name":"ToolCallError","toolName":"sleep","message":"invalid arguments: \"ms\" must be an integer","isTCE":true}`
	if string(v.Result) != want {
		t.Fatalf("result = %s, want %s", v.Result, want)
	}
}

func TestCODE5_ArgumentSnapshotAndNestedExecution(t *testing.T) {
	t.Parallel()
	var outer atomic.Pointer[registry.Token]
	p := &probe{}
	fx := newFixture(t, registry.ModeCode, codemode.Config{}, p.tool(t, &outer))
	if _, err := kernel.Listen(fx.f, fx.reg.Hooks.PreExecute, kernel.WaterfallFunc[*registry.Execution, registry.Decision](
		func(ctx context.Context, e *registry.Execution, next func(context.Context) (registry.Decision, error)) (registry.Decision, error) {
			if e.Name == "run_code" {
				outer.Store(e.Token())
			}
			return next(ctx)
		})); err != nil {
		t.Fatal(err)
	}
	v := mustValue(t, fx.run(context.Background(), `
		const bad: Array<[string, () => unknown]> = [
			["undefined", () => ({a: undefined})],
			["bigint", () => ({a: 1n})],
			["cycle", () => { const o: any = {}; o.self = o; return o; }],
			["sparse", () => ({a: [1, , 3]})],
			["minus zero", () => ({a: -0})],
			["exotic", () => ({a: new Map()})],
			["nan", () => ({a: NaN})],
			["getter", () => ({get a() { throw new Error("boom"); }})],
		];
		const out: string[] = [];
		for (const [name, make] of bad) {
			try { await tools.probe(make() as any); out.push(name + ": dispatched"); }
			catch (e) { out.push(name + ": " + e.name); }
		}
		let reads = 0;
		await tools.probe({get context() { reads++; return ""; }} as any);
		const ids = await Promise.all([tools.probe({}), tools.probe({})]);
		return {out, reads, ids: ids.map(i => i.callId)};`))
	want := `{"out":["undefined: ToolCallError","bigint: ToolCallError","cycle: ToolCallError","sparse: ToolCallError",` +
		`"minus zero: ToolCallError","exotic: ToolCallError","nan: ToolCallError","getter: ToolCallError"],` +
		`"reads":1,"ids":["c1:code:2","c1:code:3"]}`
	if string(v.Result) != want {
		t.Fatalf("result = %s\nwant     %s", v.Result, want)
	}
	seen := p.seen()
	if len(seen) != 3 {
		t.Fatalf("dispatched %d calls, want 3 (rejected snapshots dispatch nothing)", len(seen))
	}
	for i, s := range seen {
		if s.CallID != []string{"c1:code:1", "c1:code:2", "c1:code:3"}[i] || s.RootCallID != "c1" || s.Agent != "s1" ||
			!s.HasParent || !s.ParentIsOuter || s.Location != (registry.Location{Turn: 1, Step: 1}) {
			t.Fatalf("execution %d = %+v", i, s)
		}
	}
}

// TestCODE5_SnapshotTextAndErrorPaths pins what the argument snapshot sends and how it names
// the value it rejects: the exact JSON text a tool receives (property order as JSON.stringify
// gives it, shared objects that are no cycle, awkward keys) and the path in each rejection, for
// the arguments and for the returned value.
func TestCODE5_SnapshotTextAndErrorPaths(t *testing.T) {
	t.Parallel()
	raw := rawTool("raw", "Returns its arguments' JSON text.", "", "")
	raw.Execute = func(_ context.Context, e *registry.Execution) (json.RawMessage, error) {
		return json.Marshal(string(e.Args))
	}
	fx := newFixture(t, registry.ModeCode, codemode.Config{}, raw)
	v := mustValue(t, fx.run(context.Background(), `
		const shared = {x: 1};
		const cyc: any = {k: {}}; cyc.k.back = cyc;
		const texts = [
			await tools.raw({b: 1, 2: "x", a: [3, {c: null}], 1: true, ["__proto__"]: "p", "q\"": "\u2028\n", e: 1e21, f: -1.5}),
			await tools.raw({s1: shared, s2: [shared, shared], empty: {}, none: []}),
			await tools.raw(Object.assign(Object.create(null), {z: 0, y: 0.1})),
		];
		const bad: Array<[string, () => unknown]> = [
			["undefined", () => ({a: {b: [1, undefined]}})],
			["nan", () => ({a: [[1, 2, NaN]]})],
			["infinity", () => Infinity],
			["minus zero", () => ({x: {y: -0}})],
			["hole", () => ({a: [1, , 3]})],
			["cycle", () => cyc],
			["map", () => ({m: new Map()})],
			["array-like", () => ({d: {arr: Object.setPrototypeOf([], Object.prototype)}})],
			["function", () => ({f: () => 1})],
			["bigint", () => ({deep: [{b: 1n}]})],
			["symbol", () => [Symbol("s")]],
		];
		const errors: string[] = [];
		for (const [name, make] of bad) {
			try { await tools.raw(make() as any); errors.push(name + ": dispatched"); }
			catch (e) { errors.push(e.message); }
		}
		return {texts, errors};`))
	var got struct {
		Texts  []string `json:"texts"`
		Errors []string `json:"errors"`
	}
	if err := json.Unmarshal(v.Result, &got); err != nil {
		t.Fatal(err)
	}
	wantTexts := []string{
		`{"1":true,"2":"x","b":1,"a":[3,{"c":null}],"__proto__":"p","q\"":"` + "\u2028" + `\n","e":1e+21,"f":-1.5}`,
		`{"s1":{"x":1},"s2":[{"x":1},{"x":1}],"empty":{},"none":[]}`,
		`{"z":0,"y":0.1}`,
	}
	wantErrors := []string{
		"arguments.a.b[1] is undefined",
		"arguments.a[0][2] is NaN, which JSON cannot carry",
		"arguments is Infinity, which JSON cannot carry",
		"arguments.x.y is -0, which JSON cannot carry",
		"arguments.a[1] is a hole in a sparse array",
		"arguments.k.back is a cycle",
		"arguments.m is not a plain object",
		"arguments.d.arr is not a plain array",
		"arguments.f is a function, which JSON cannot carry",
		"arguments.deep[0].b is a bigint, which JSON cannot carry",
		"arguments[0] is a symbol, which JSON cannot carry",
	}
	for i, w := range wantTexts {
		if i >= len(got.Texts) || got.Texts[i] != w {
			t.Fatalf("texts = %q\nwant    %q", got.Texts, wantTexts)
		}
	}
	if len(got.Errors) != len(wantErrors) {
		t.Fatalf("errors = %q", got.Errors)
	}
	for i, w := range wantErrors {
		if want := "arguments of raw are not lossless JSON: " + w; got.Errors[i] != want {
			t.Errorf("rejection %d = %q\nwant          %q", i, got.Errors[i], want)
		}
	}
	res := fx.run(context.Background(), `return {r: [1, {s: undefined}]};`)
	if want := "Error: code run failed (invalid-output): the returned value is not lossless JSON: result.r[1].s is undefined"; !res.IsError || text(res.Content) != want {
		t.Fatalf("returned value: %q, want %q", text(res.Content), want)
	}
}

func TestCODE6_SubSchedulerFollowsTheNativeRules(t *testing.T) {
	t.Parallel()
	t.Run("exclusive calls never overlap and start in submission order", func(t *testing.T) {
		t.Parallel()
		g := newGate()
		fx := newFixture(t, registry.ModeCode, codemode.Config{}, g.tool(t, "excl", false))
		done := make(chan *registry.Result, 1)
		go func() {
			done <- fx.run(context.Background(), `return (await Promise.all([tools.excl({text: "a"}), tools.excl({text: "b"}), tools.excl({text: "c"})])).join("");`)
		}()
		var order []string
		for range 3 {
			order = append(order, <-g.started)
			g.wantNoStart(t, "while "+order[len(order)-1]+" ran")
			g.release <- struct{}{}
		}
		if res := <-done; strings.Join(order, "") != "abc" || text(res.Content) != "abc" || g.maxRunning() != 1 {
			t.Fatalf("order %v, content %q, max %d", order, text(res.Content), g.maxRunning())
		}
	})
	t.Run("parallel calls overlap up to maxParallelSubCalls", func(t *testing.T) {
		t.Parallel()
		g := newGate()
		fx := newFixtureCap(t, registry.ModeCode, codemode.Config{}, func(agent string) int {
			if agent == "s1" {
				return 2
			}
			return 0
		}, g.tool(t, "par", true))
		done := make(chan *registry.Result, 1)
		go func() {
			done <- fx.run(context.Background(), `return (await Promise.all(["a","b","c","d","e"].map(text => tools.par({text})))).join("");`)
		}()
		<-g.started
		<-g.started
		g.wantNoStart(t, "beyond the cap")
		for range 5 {
			g.release <- struct{}{}
		}
		if res := <-done; text(res.Content) != "abcde" || g.maxRunning() != 2 {
			t.Fatalf("content %q, max in flight %d (cap 2)", text(res.Content), g.maxRunning())
		}
	})
	t.Run("an exclusive call waits for the parallel ones before it and blocks the later ones", func(t *testing.T) {
		t.Parallel()
		g := newGate()
		fx := newFixture(t, registry.ModeCode, codemode.Config{}, g.tool(t, "par", true), g.tool(t, "excl", false))
		done := make(chan *registry.Result, 1)
		go func() {
			done <- fx.run(context.Background(), `return (await Promise.all([tools.par({text: "p1"}), tools.par({text: "p2"}),
				tools.excl({text: "x"}), tools.par({text: "p3"})])).join(",");`)
		}()
		first := map[string]bool{<-g.started: true, <-g.started: true}
		if !first["p1"] || !first["p2"] {
			t.Fatalf("first started: %v", first)
		}
		g.release <- struct{}{}
		g.release <- struct{}{}
		if s := <-g.started; s != "x" {
			t.Fatalf("then %s started, want x", s)
		}
		g.wantNoStart(t, "while the exclusive call ran")
		g.release <- struct{}{}
		if s := <-g.started; s != "p3" {
			t.Fatalf("then %s, want p3", s)
		}
		g.release <- struct{}{}
		if res := <-done; text(res.Content) != "p1,p2,x,p3" {
			t.Fatalf("content %q", text(res.Content))
		}
	})
}

func TestCODE7_SubCallsAreLoggedWhileTheProgramRuns(t *testing.T) {
	t.Parallel()
	var fx *fixture
	var seenDuring atomic.Value
	during := rawTool("peek", "Report the code-dispatch events logged so far.", "", "")
	during.Execute = func(ctx context.Context, _ *registry.Execution) (json.RawMessage, error) {
		// The appends are background work: wait (bounded) until the first call's events and this
		// call's start are committed, while the program is still waiting for this call.
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for len(fx.j.Events()) < 3 && fx.j.Wait(ctx, int64(len(fx.j.Events()))-1) == nil {
		}
		seenDuring.Store(strings.Join(fx.dispatches(), ","))
		return json.RawMessage(`"ok"`), nil
	}
	fx = newFixture(t, registry.ModeCode, codemode.Config{}, during)
	res := fx.run(context.Background(), `await tools.echo({text: "one"}); await tools.peek({}); return "done";`)
	if res.IsError {
		t.Fatal(text(res.Content))
	}
	if got := seenDuring.Load(); got != "start c1:code:1,done c1:code:1,start c1:code:2" {
		t.Fatalf("while the program ran the log held %v", got)
	}
	evs := fx.j.Events()
	if len(evs) != 4 {
		t.Fatalf("%d events", len(evs))
	}
	start, err := eventlog.Decode[eventlog.CodeDispatchStart](evs[0])
	if err != nil {
		t.Fatal(err)
	}
	end, err := eventlog.Decode[eventlog.CodeDispatch](evs[1])
	if err != nil {
		t.Fatal(err)
	}
	if start.RootCallID != "c1" || start.ParentCallID != "c1" || start.SubCallID != "c1:code:1" || start.Name != "echo" ||
		string(start.Arguments) != `{"text":"one"}` || string(start.Location) != `{"turn":1,"step":1}` {
		t.Fatalf("start = %+v", start)
	}
	if end.CodeDispatchStart.SubCallID != "c1:code:1" || end.IsError || text(end.Content) != "one" {
		t.Fatalf("dispatch = %+v", end)
	}

	t.Run("no agent, no log", func(t *testing.T) {
		fx := newFixture(t, registry.ModeCode, codemode.Config{})
		in := fx.input("c1", `return await tools.echo({text: "x"});`)
		in.Agent = ""
		if res := fx.reg.Execute(context.Background(), in); res.IsError || len(fx.j.Events()) != 0 {
			t.Fatalf("%q, %d events", text(res.Content), len(fx.j.Events()))
		}
	})
	t.Run("the code-dispatch-log waterfall replaces the logged content; a failing listener does not", func(t *testing.T) {
		fx := newFixture(t, registry.ModeCode, codemode.Config{})
		n := 0
		fx.rt.DispatchLog.On(func(ctx context.Context, c *registry.Call, next func(context.Context) ([]llm.Block, error)) ([]llm.Block, error) {
			n++
			if n == 2 {
				return nil, errors.New("listener failed")
			}
			return []llm.Block{llm.TextBlock("[redacted]")}, nil
		})
		v := mustValue(t, fx.run(context.Background(), `return [await tools.echo({text: "secret"}), await tools.echo({text: "plain"})];`))
		if string(v.Result) != `["secret","plain"]` {
			t.Fatalf("the program must see the real value: %s", v.Result)
		}
		var logged []string
		for _, ev := range fx.j.Events() {
			if ev.Type == eventlog.TypeToolCodeDispatch {
				p, _ := eventlog.Decode[eventlog.CodeDispatch](ev)
				logged = append(logged, text(p.Content))
			}
		}
		if strings.Join(logged, ",") != "[redacted],plain" {
			t.Fatalf("logged %v", logged)
		}
	})
}

func TestCODE8_ProgramReceivesFinalValuesAndFailures(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, registry.ModeCode, codemode.Config{})
	if _, err := kernel.Listen(fx.f, fx.reg.Hooks.PostExecute, kernel.WaterfallFunc[*registry.Call, registry.PostDecision](
		func(ctx context.Context, c *registry.Call, next func(context.Context) (registry.PostDecision, error)) (registry.PostDecision, error) {
			if c.Exec.Name == "echo" && !c.Result.IsError {
				return registry.PostDecision{Value: json.RawMessage(`"replaced"`)}, nil
			}
			return next(ctx)
		})); err != nil {
		t.Fatal(err)
	}
	if _, err := kernel.Listen(fx.f, fx.reg.Hooks.PreExecute, kernel.WaterfallFunc[*registry.Execution, registry.Decision](
		func(ctx context.Context, e *registry.Execution, next func(context.Context) (registry.Decision, error)) (registry.Decision, error) {
			if e.Name == "sleep" {
				return registry.Deny("sleeping is not allowed here"), nil
			}
			return next(ctx)
		})); err != nil {
		t.Fatal(err)
	}
	v := mustValue(t, fx.run(context.Background(), `
		const a = await tools.echo({text: "original"});
		let denied;
		try { await tools.sleep({ms: 1}); } catch (e) { denied = [e.toolName, e.message, Object.keys(e)]; }
		return {a, denied};`))
	if want := `{"a":"replaced","denied":["sleep","sleeping is not allowed here",["toolName"]]}`; string(v.Result) != want {
		t.Fatalf("result = %s, want %s", v.Result, want)
	}
}

func TestCODE9_ContextFlowsToTheOuterCall(t *testing.T) {
	t.Parallel()
	p := &probe{}
	fx := newFixture(t, registry.ModeCode, codemode.Config{}, p.tool(t, nil))
	res := fx.run(context.Background(), `
		await tools.probe({context: "first"});
		await tools.probe({image: true});
		await tools.probe({context: "second", conclude: true});
		return "ok";`)
	if res.IsError || !res.ConcludesTurn {
		t.Fatalf("result %q, concludes %v", text(res.Content), res.ConcludesTurn)
	}
	var got []string
	for _, m := range res.AdditionalContexts {
		s := m.ID + "/" + m.Source.Kind
		if m.Source.Plugin != "" {
			s += ":" + m.Source.Plugin
		}
		got = append(got, s)
	}
	if strings.Join(got, ",") != "ctx-first/user,c1:code:2:image/plugin:tools-code-mode,ctx-second/user" {
		t.Fatalf("contexts = %v", got)
	}
	img := res.AdditionalContexts[1]
	if img.Role != llm.RoleUser || len(img.Content) != 3 || img.Content[2].Type != llm.BlockImage {
		t.Fatalf("image context = %+v", img)
	}

	t.Run("contexts survive a later failure of the outer call", func(t *testing.T) {
		res := fx.run(context.Background(), `await tools.probe({context: "kept", conclude: true}); throw new Error("later");`)
		if !res.IsError || res.ConcludesTurn || len(res.AdditionalContexts) != 1 || res.AdditionalContexts[0].ID != "ctx-kept" {
			t.Fatalf("%q, concludes %v, contexts %+v", text(res.Content), res.ConcludesTurn, res.AdditionalContexts)
		}
	})
}

func TestCODE10_SubCallsHaveNoMetaAndAreNotCollapsed(t *testing.T) {
	t.Parallel()
	p := &probe{}
	fx := newFixture(t, registry.ModeCode, codemode.Config{}, p.tool(t, nil))
	var metas []string
	if _, err := kernel.Listen(fx.f, fx.reg.Hooks.PostExecute, kernel.WaterfallFunc[*registry.Call, registry.PostDecision](
		func(ctx context.Context, c *registry.Call, next func(context.Context) (registry.PostDecision, error)) (registry.PostDecision, error) {
			if c.Exec.Name == "probe" {
				metas = append(metas, string(c.Result.Meta))
			}
			return next(ctx)
		})); err != nil {
		t.Fatal(err)
	}
	direct := fx.reg.Execute(context.Background(), registry.Input{CallID: "d1", Name: "probe", Args: json.RawMessage(`{}`), Scope: agentScope})
	if direct.ErrorInfo() == nil || direct.ErrorInfo().Code != fault.CodeUnknownTool {
		t.Fatalf("a direct call in code mode must collapse: %q", text(direct.Content))
	}
	if res := fx.run(context.Background(), `return (await tools.probe({})).callId;`); res.IsError || text(res.Content) != "c1:code:1" {
		t.Fatalf("sub-call: %q", text(res.Content))
	}
	if len(metas) != 1 || metas[0] != "" {
		t.Fatalf("sub-call metas = %q, want none", metas)
	}
}

func TestCODE11_SettlementAbortsStragglersAndWaitsForThem(t *testing.T) {
	t.Parallel()
	g := newGate()
	fx := newFixture(t, registry.ModeCode, codemode.Config{}, g.tool(t, "excl", false))
	res := fx.run(context.Background(), `
		tools.excl({text: "straggler"});
		tools.echo({text: "queued"});
		const t0 = Date.now();
		while (Date.now() - t0 < 1000) {} // the lane starts the straggler meanwhile
		return "returned first";`)
	if text(res.Content) != "returned first" {
		t.Fatalf("content %q", text(res.Content))
	}
	if g.aborted.Load() != 1 {
		t.Fatalf("the in-flight call was not aborted by the settlement (%d)", g.aborted.Load())
	}
	if got := strings.Join(fx.dispatches(), ","); got != "start c1:code:1,done c1:code:1" {
		t.Fatalf("log = %s: the straggler's events are written before run_code returns, the queued call's never", got)
	}
	var d eventlog.CodeDispatch
	for _, ev := range fx.j.Events() {
		if ev.Type == eventlog.TypeToolCodeDispatch {
			d, _ = eventlog.Decode[eventlog.CodeDispatch](ev)
		}
	}
	if !d.IsError || !strings.Contains(text(d.Content), "run_code settled") {
		t.Fatalf("straggler content %q", text(d.Content))
	}

	t.Run("a binding called after the program returned is not dispatched", func(t *testing.T) {
		fx := newFixture(t, registry.ModeCode, codemode.Config{})
		res := fx.run(context.Background(), `let p = Promise.resolve(); for (let i = 0; i < 10; i++) p = p.then(() => 0);
			p.then(() => tools.echo({text: "late"})); return 1;`)
		if res.IsError || len(fx.dispatches()) != 0 {
			t.Fatalf("%q, %v", text(res.Content), fx.dispatches())
		}
	})
}

func TestCODE12_OutcomeAndRendering(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, registry.ModeCode, codemode.Config{})
	for _, c := range []struct{ code, want string }{
		{`console.log("a"); console.log("b", 1, {x: true}); return "raw\ntext";`, "a\nb 1 {\"x\":true}\nraw\ntext"},
		{`return {a: 1, b: [1, "x"], c: {}};`, "{\n  \"a\": 1,\n  \"b\": [\n    1,\n    \"x\"\n  ],\n  \"c\": {}\n}"},
		{`return {a: {b: {c: {d: {e: [1, 2]}}}}};`, "{\n  \"a\": {\n    \"b\": {\n      \"c\": {\n        \"d\": {\"e\":[1,2]}\n      }\n    }\n  }\n}"},
		{`return null;`, "null"},
		{`console.log("");`, noOutputText},
		{`return "";`, noOutputText},
		{``, noOutputText},
		{`console.log("only logs");`, "only logs"},
	} {
		res := fx.run(context.Background(), c.code)
		if res.IsError || text(res.Content) != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.code, text(res.Content), c.want)
		}
	}
	v := mustValue(t, fx.run(context.Background(), `console.log("x"); return [1];`))
	if strings.Join(v.Logs, "|") != "x" || string(v.Result) != "[1]" {
		t.Fatalf("value = %+v", v)
	}
	if v := mustValue(t, fx.run(context.Background(), `return undefined;`)); v.Result != nil || v.Logs == nil {
		t.Fatalf("no result: %+v", v)
	}
	res := fx.run(context.Background(), `console.log("got this far"); throw new TypeError("bad thing");`)
	if info := res.ErrorInfo(); info == nil || info.Code != "CODE_RUN_FAILED" || info.Name != "CodeRunFailedError" ||
		res.Error.Message != "code run failed (exception): TypeError: bad thing\nCaptured output:\ngot this far" {
		t.Fatalf("failure = %+v %+v", res.Error, info)
	}
	for code, kind := range map[string]string{
		`return 1n;`:                      "invalid-output",
		`return {f: () => 1};`:            "invalid-output",
		`const x: number = ;`:             "exception",
		`await new Promise(() => {});`:    "timeout",
		`throw "a string";`:               "exception",
		`console.log("x".repeat(70000));`: "output-limit",
		`return "y".repeat(70000);`:       "output-limit",
		`import fs from "fs"; return fs;`: "exception",
		`return await import("os");`:      "exception",
	} {
		res := fx.run(context.Background(), code)
		if !res.IsError || !strings.HasPrefix(res.Error.Message, "code run failed ("+kind+"): ") {
			t.Errorf("%s: %q, want kind %s", code, text(res.Content), kind)
		}
	}
}

const noOutputText = "(run_code completed with no output)"

func TestCODE13_NoRunCodeInsideAndAFreshEngineEachRun(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, registry.ModeBoth, codemode.Config{})
	v := mustValue(t, fx.run(context.Background(), `globalThis.leftover = 42; return [typeof tools.run_code, Object.keys(tools).includes("run_code")];`))
	if string(v.Result) != `["undefined",false]` {
		t.Fatalf("result = %s", v.Result)
	}
	v = mustValue(t, fx.run(context.Background(), `return typeof globalThis.leftover;`))
	if string(v.Result) != `"undefined"` {
		t.Fatalf("state leaked between runs: %s", v.Result)
	}
	res := fx.run(context.Background(), `return await (tools as any)["run_code"]({code: "return 1", description: "x"});`)
	if !res.IsError || !strings.Contains(res.Error.Message, "not a function") {
		t.Fatalf("%q", text(res.Content))
	}
}

// TestCODE11_WallTimeAbortsASubCallThatIsPreparing: a run that runs out of wall time while a
// sub-call is in its prepare stage (a pre-execute listener waiting on its signal) aborts that
// stage, as it aborts a body: the outcome is the timeout, and the call is logged as started and
// done (the listener saw its signal end, with the settlement's reason).
func TestCODE11_WallTimeAbortsASubCallThatIsPreparing(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, registry.ModeCode, codemode.Config{WallTimeout: 100 * time.Millisecond})
	cause := make(chan error, 1)
	if _, err := kernel.Listen(fx.f, fx.reg.Hooks.PreExecute, kernel.WaterfallFunc[*registry.Execution, registry.Decision](
		func(ctx context.Context, e *registry.Execution, next func(context.Context) (registry.Decision, error)) (registry.Decision, error) {
			if e.Name == "echo" {
				select {
				case <-ctx.Done():
					cause <- context.Cause(ctx)
				case <-time.After(time.Minute): // a guard: the test fails below, it does not hang
					cause <- nil
				}
				return registry.Deny("stopped"), nil
			}
			return next(ctx)
		})); err != nil {
		t.Fatal(err)
	}
	res := fx.run(context.Background(), `await tools.echo({text: "x"});`)
	if !res.IsError || !strings.HasPrefix(res.Error.Message, "code run failed (timeout): the program ran longer than its wall-time limit") {
		t.Fatalf("outcome %q", text(res.Content))
	}
	if c := <-cause; c == nil || c.Error() != "run_code settled" {
		t.Fatalf("the preparing call's signal ended with %v, want the settlement", c)
	}
	if got := strings.Join(fx.dispatches(), ","); got != "start c1:code:1,done c1:code:1" {
		t.Fatalf("log %s", got)
	}
}
