package agentloop

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/llm/scripted"
	"github.com/dshd/dshd/pkg/promptasm"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/scheduler"
)

// cancel writes a cancel request as the HTTP handler does.
func (h *harness) cancel(cause Cause, keepInbox bool) {
	h.t.Helper()
	_, err := h.j.Append(context.Background(), func(hd eventlog.Head) ([]eventlog.NewEvent, error) {
		return CancelEvents(hd, cause, keepInbox), nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
}

// watch interrupts r whenever a cancel request is appended, as the replica's watcher does.
func (h *harness) watch(r *Runner) {
	h.j.OnAppend = func(evs []eventlog.Event) {
		for _, ev := range evs {
			if ev.Type == eventlog.TypeAgentCancel {
				var d eventlog.AgentCancel
				_ = json.Unmarshal(ev.Data, &d)
				r.Interrupt(d.Reason)
			}
		}
	}
}

type served struct {
	reasons []Reason
	err     error
}

func (h *harness) serveAsync(r *Runner) <-chan served {
	ch := make(chan served, 1)
	go func() {
		reasons, err := r.Serve(context.Background())
		ch <- served{reasons, err}
	}()
	return ch
}

func results(t *testing.T, h *harness) []eventlog.ToolResult {
	var out []eventlog.ToolResult
	for _, ev := range h.ofType(eventlog.TypeToolResult) {
		out = append(out, decode[eventlog.ToolResult](t, ev.Data))
	}
	return out
}

func code(d eventlog.ToolResult) string {
	if d.Error == nil {
		return ""
	}
	return d.Error.Code
}

func TestScenario23_CancelDuringParallelTools(t *testing.T) {
	t.Parallel()
	g, tool := newGate(t)
	h := newHarness(t, nil, tool)
	h.cfg.Scheduler = scheduler.New(h.reg, scheduler.Config{MaxParallelToolCallsFunc: func() int { return 2 }})
	h.post(eventlog.InboxNextTurn, "tools:4 tool:gate")
	r := NewRunner(h.cfg, h.j)
	h.watch(r)
	done := h.serveAsync(r)
	<-g.started
	<-g.started
	h.cancel(Cause{Kind: "user"}, false)
	close(g.release)
	s := <-done
	if s.err != nil || len(s.reasons) != 1 || s.reasons[0].Kind != eventlog.EndAborted || s.reasons[0].Reason.Kind != "user" {
		t.Fatalf("served %+v %v", s.reasons, s.err)
	}
	if n := len(g.ran); n != 2 {
		t.Fatalf("%d bodies ran, want 2", n)
	}
	rs := results(t, h)
	want := []string{fault.CodeAborted, fault.CodeAborted, fault.CodeAbortedBeforeDispatch, fault.CodeAbortedBeforeDispatch}
	if len(rs) != 4 {
		t.Fatalf("%d results", len(rs))
	}
	for i, r := range rs {
		if code(r) != want[i] || r.Message.Source.CallID != decode[eventlog.ToolCall](t, h.ofType(eventlog.TypeToolCall)[i].Data).CallID {
			t.Fatalf("result %d: code %q call %s", i, code(r), r.Message.Source.CallID)
		}
	}
	h.checkInvariants()
	// The contexts of p1 and p2 stay parked until the next followup.
	if !r.Pending() || len(r.m.inbox.NextStep) != 2 {
		t.Fatalf("parked contexts: %+v", r.m.inbox)
	}
	before := len(h.ofType(eventlog.TypeUserMessage))
	h.post(eventlog.InboxNextTurn, "text")
	if _, err := r.Serve(context.Background()); err != nil {
		t.Fatal(err)
	}
	users := h.ofType(eventlog.TypeUserMessage)[before:]
	var texts []string
	for _, u := range users {
		texts = append(texts, decode[llm.Message](t, u.Data).Text())
	}
	if len(texts) != 3 || !strings.HasPrefix(texts[0], "context from") || !strings.HasPrefix(texts[1], "context from") || texts[2] != "text" {
		t.Fatalf("next turn's user messages %q", texts)
	}
	h.checkInvariants()
}

func TestScenario24_CancelBeforeToolsStart(t *testing.T) {
	t.Parallel()
	g, tool := newGate(t)
	h := newHarness(t, nil, tool)
	var r *Runner
	h.cfg.AfterAssistantFunc = func(llm.Message) { r.Interrupt(Cause{Kind: "user"}) }
	r = NewRunner(h.cfg, h.j)
	h.post(eventlog.InboxNextTurn, "tools:3 tool:gate")
	reasons, err := r.Serve(context.Background())
	if err != nil || reasons[0].Kind != eventlog.EndAborted {
		t.Fatalf("%+v %v", reasons, err)
	}
	if len(g.ran) != 0 {
		t.Fatal("a body ran")
	}
	rs := results(t, h)
	if len(rs) != 3 || len(h.ofType(eventlog.TypeToolCall)) != 3 {
		t.Fatalf("%d results", len(rs))
	}
	for _, r := range rs {
		if code(r) != fault.CodeAbortedBeforeDispatch || r.Message.Content[0].Content[0].Text != "Error: tool call aborted before dispatch" {
			t.Fatalf("result %+v", r)
		}
	}
	h.checkInvariants()
}

func TestLOOP1_SteerDuringRunningTurn(t *testing.T) {
	t.Parallel()
	g, tool := newGate(t)
	h := newHarness(t, nil, tool)
	h.post(eventlog.InboxNextTurn, "tools:1 tool:gate")
	r := NewRunner(h.cfg, h.j)
	done := h.serveAsync(r)
	<-g.started
	h.post(eventlog.InboxNextStep, "say:steered")
	close(g.release)
	s := <-done
	if s.err != nil || len(s.reasons) != 1 || s.reasons[0].Kind != eventlog.EndCompleted {
		t.Fatalf("%+v %v", s.reasons, s.err)
	}
	// The steer is claimed at the next step of the same turn and drives its answer.
	var steps []int
	for _, ev := range h.ofType(eventlog.TypeUserMessage) {
		if decode[llm.Message](t, ev.Data).Text() == "say:steered" {
			for _, e := range h.j.Events()[:ev.Seq] {
				if e.Type == eventlog.TypeStepStart {
					steps = append(steps, decode[eventlog.StepStart](t, e.Data).Step)
				}
			}
		}
	}
	if len(steps) == 0 || steps[len(steps)-1] != 2 {
		t.Fatalf("steer entered at steps %v, want step 2", steps)
	}
	msgs := h.ofType(eventlog.TypeAssistantMessage)
	if got := decode[eventlog.AssistantMessage](t, msgs[len(msgs)-1].Data).Message.Text(); got != "steered" {
		t.Fatalf("answer %q", got)
	}
	h.checkInvariants()
}

func TestLOOP1_InjectIsDeferredToAfterTheBatch(t *testing.T) {
	t.Parallel()
	g, tool := newGate(t)
	h := newHarness(t, nil, tool)
	h.post(eventlog.InboxNextTurn, "tools:2 tool:gate")
	r := NewRunner(h.cfg, h.j)
	done := h.serveAsync(r)
	<-g.started
	<-g.started
	h.post(eventlog.InboxNextStep, "injected")
	close(g.release)
	if s := <-done; s.err != nil {
		t.Fatal(s.err)
	}
	types := h.types()
	lastResult, firstInjected := -1, -1
	for i, ev := range h.j.Events() {
		if ev.Type == eventlog.TypeToolResult {
			lastResult = i
		}
		if ev.Type == eventlog.TypeUserMessage && decode[llm.Message](t, ev.Data).Text() == "injected" && firstInjected < 0 {
			firstInjected = i
		}
	}
	if firstInjected < lastResult {
		t.Fatalf("injected message at %d before the last tool result at %d: %v", firstInjected, lastResult, types)
	}
	h.checkInvariants()
}

func TestScenario25_ContextsAfterAllResults(t *testing.T) {
	t.Parallel()
	g, tool := newGate(t)
	close(g.release)
	h := newHarness(t, nil, tool)
	h.post(eventlog.InboxNextTurn, "tools:2 tool:gate")
	h.serve(context.Background())
	var order []string
	for _, ev := range h.j.Events() {
		switch ev.Type {
		case eventlog.TypeToolResult:
			order = append(order, "result")
		case eventlog.TypeUserMessage:
			if m := decode[llm.Message](t, ev.Data); strings.HasPrefix(m.Text(), "context from") {
				order = append(order, m.Text())
			}
		}
	}
	want := []string{"result", "result", "context from step 1 call 1", "context from step 1 call 2"}
	if strings.Join(order, "|") != strings.Join(want, "|") {
		t.Fatalf("order %q", order)
	}
	h.checkInvariants()
}

// slowStream passes n chunks through, reports it, then stalls until the request is cancelled.
type slowStream struct {
	llm.Stream
	ctx  context.Context
	n    int
	seen int
	hit  chan struct{}
	once sync.Once
}

func (s *slowStream) Recv() (llm.Chunk, error) {
	if s.seen == s.n {
		s.once.Do(func() { close(s.hit) })
		<-s.ctx.Done()
		return llm.Chunk{}, s.ctx.Err()
	}
	s.seen++
	return s.Stream.Recv()
}

type signalProvider struct {
	p   llm.Provider
	n   int
	hit chan struct{}
}

func (p *signalProvider) Stream(ctx context.Context, req llm.Request) (llm.Stream, error) {
	s, err := p.p.Stream(ctx, req)
	if err != nil {
		return nil, err
	}
	return &slowStream{Stream: s, ctx: ctx, n: p.n, hit: p.hit}, nil
}

func TestLOOP4_CancelMidStreamKeepsInterruptedText(t *testing.T) {
	t.Parallel()
	sp := &signalProvider{p: scripted.New(scripted.Config{}), n: 3, hit: make(chan struct{})}
	h := newHarness(t, sp)
	h.post(eventlog.InboxNextTurn, "say:partial%20answer%20that%20never%20ends")
	r := NewRunner(h.cfg, h.j)
	h.watch(r)
	done := h.serveAsync(r)
	<-sp.hit
	h.cancel(Cause{Kind: "user"}, false)
	s := <-done
	if s.err != nil || s.reasons[0].Kind != eventlog.EndAborted {
		t.Fatalf("%+v %v", s.reasons, s.err)
	}
	am := h.ofType(eventlog.TypeAssistantMessage)
	if len(am) != 1 {
		t.Fatalf("%d assistant messages", len(am))
	}
	d := decode[eventlog.AssistantMessage](t, am[0].Data)
	if !d.Interrupted || !strings.HasPrefix(d.Message.Text(), "partial") || len(d.Message.ToolCalls()) != 0 {
		t.Fatalf("interrupted message %+v", d)
	}
	// The stream was cut before its usage chunk: the call is billed by an estimate (the request's
	// bytes and the text streamed, a token per four bytes), so a cancel does not make it free. The
	// message keeps the reference's shape, without usage; the estimate is the ignorable
	// assistant/usage right after it.
	if d.Usage != nil {
		t.Fatalf("interrupted message carries usage %+v", d.Usage)
	}
	au := h.ofType(eventlog.TypeAssistantUsage)
	if len(au) != 1 || !au[0].Ignorable || au[0].Seq != am[0].Seq+1 {
		t.Fatalf("assistant/usage events %+v after the message at %d", au, am[0].Seq)
	}
	if u := decode[eventlog.AssistantUsage](t, au[0].Data).Usage; !u.Estimated || u.InputTokens < 1 || u.OutputTokens != (len(d.Message.Text())+3)/4 {
		t.Fatalf("interrupted call usage %+v for %q", u, d.Message.Text())
	}
	h.checkInvariants()
}

func TestRES5_ConcludesTurn(t *testing.T) {
	t.Parallel()
	tool, err := registry.Define(registry.DefineSpec[struct{}, string]{Name: "finish", Description: "End the turn."},
		func(_ context.Context, exec *registry.Execution, _ struct{}) (string, error) {
			exec.ConcludeTurn()
			return "finished", nil
		})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, nil, tool)
	h.post(eventlog.InboxNextTurn, "tool:finish args:{}")
	reasons := h.serve(context.Background())
	if reasons[0].Kind != eventlog.EndCompleted || len(h.ofType(eventlog.TypeAssistantMessage)) != 1 {
		t.Fatalf("reasons %+v, %d assistant messages; want the turn to end after the tool", reasons, len(h.ofType(eventlog.TypeAssistantMessage)))
	}
	h.checkInvariants()
}

func TestLOOP4_MaxTokens(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.post(eventlog.InboxNextTurn, "maxtokens")
	reasons := h.serve(context.Background())
	if reasons[0].Kind != eventlog.EndMaxTokens {
		t.Fatalf("reasons %+v", reasons)
	}
	d := decode[eventlog.AssistantMessage](t, h.ofType(eventlog.TypeAssistantMessage)[0].Data)
	if len(d.Message.ToolCalls()) != 0 || len(h.ofType(eventlog.TypeToolCall)) != 0 {
		t.Fatalf("tool calls survived max-tokens: %+v", d.Message)
	}
	h.checkInvariants()
}

func TestLOOP4_RateLimitThenSuccess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.post(eventlog.InboxNextTurn, "fail:RATE_LIMIT failtimes:1")
	reasons := h.serve(context.Background())
	if reasons[0].Kind != eventlog.EndCompleted {
		t.Fatalf("reasons %+v", reasons)
	}
	h.checkInvariants()
}

func TestLOOP8_ModelKeepsFailing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.post(eventlog.InboxNextTurn, "fail:SERVER")
	reasons := h.serve(context.Background())
	if reasons[0].Kind != eventlog.EndError || reasons[0].Error.Code != llm.CodeServer {
		t.Fatalf("reasons %+v", reasons)
	}
	end := decode[eventlog.TurnEnd](t, h.ofType(eventlog.TypeTurnEnd)[0].Data)
	if end.Reason.Error == nil || end.Reason.Error.Code != "SERVER" {
		t.Fatalf("turn/end %+v", end)
	}
	h.checkInvariants()
	// A failed turn does not end the loop: the next message is served normally.
	h.post(eventlog.InboxNextTurn, "text")
	if r := h.serve(context.Background()); r[0].Kind != eventlog.EndCompleted {
		t.Fatalf("next turn %+v", r)
	}
}

func TestLOOP8_MaxSteps(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.cfg.MaxSteps = 2
	h.post(eventlog.InboxNextTurn, "tools:1 steps:5")
	reasons := h.serve(context.Background())
	if reasons[0].Kind != eventlog.EndError || reasons[0].Error.Code != CodeMaxSteps {
		t.Fatalf("reasons %+v", reasons)
	}
	if n := len(h.ofType(eventlog.TypeStepStart)); n != 2 {
		t.Fatalf("%d steps", n)
	}
	h.checkInvariants()
}

func TestTodoWriteLogsEvent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.post(eventlog.InboxNextTurn, `tool:todo_write args:{"todos":[{"content":"plan","status":"pending"}]}`)
	h.serve(context.Background())
	types := h.types()
	i := strings.Index(strings.Join(types, " "), "todo/write tool/result")
	if i < 0 {
		t.Fatalf("no todo/write right before tool/result: %v", types)
	}
	d := decode[map[string][]map[string]string](t, h.ofType("todo/write")[0].Data)
	if d["todos"][0]["content"] != "plan" {
		t.Fatalf("todo/write %+v", d)
	}
	h.checkInvariants()
}

func TestPRM8_AssemblyFailureEndsTurnWithoutStep(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.cfg.PromptInput = promptasm.Input{ToolOrder: []string{"ghost", promptasm.ToolOrderRest}}
	h.post(eventlog.InboxNextTurn, "text")
	reasons := h.serve(context.Background())
	if reasons[0].Kind != eventlog.EndError || reasons[0].Error.Code != CodePrompt {
		t.Fatalf("reasons %+v", reasons)
	}
	if len(h.ofType(eventlog.TypeStepStart)) != 0 || len(h.ofType(eventlog.TypeRequestHeader)) != 0 {
		t.Fatalf("a step or header was logged: %v", h.types())
	}
	h.checkInvariants()
}

func TestLOOP7_CancelBetweenTurnsOpensNoEmptyTurn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	r := NewRunner(h.cfg, h.j)
	h.post(eventlog.InboxNextTurn, "text")
	if _, err := r.Serve(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A followup arrives and is cancelled before the runner wakes again.
	h.post(eventlog.InboxNextTurn, "text")
	h.cancel(Cause{Kind: "user"}, false)
	reasons, err := r.Serve(context.Background())
	if err != nil || len(reasons) != 0 {
		t.Fatalf("served %+v %v; want no turn", reasons, err)
	}
	if n := len(h.ofType(eventlog.TypeTurnStart)); n != 1 {
		t.Fatalf("%d turns", n)
	}
}
