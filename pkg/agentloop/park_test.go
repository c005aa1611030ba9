package agentloop

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/approval"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
)

// parkHarness is approvalHarness with parking on, plus a client-executed tool `alert`.
func parkHarness(t *testing.T) *harness {
	t.Helper()
	alert, err := registry.ClientTool(registry.ClientSpec{Name: "alert", Description: "shows an alert in the browser",
		Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`), TimeoutMs: 60_000})
	if err != nil {
		t.Fatal(err)
	}
	h, _ := approvalHarness(t, time.Hour)
	if _, err := h.reg.Register(h.k.Fiber("client", nil), alert); err != nil {
		t.Fatal(err)
	}
	h.cfg.Park = &ParkConfig{ApprovalTimeout: time.Minute}
	return h
}

// parkOf returns the log's park, failing the test when the log does not end parked.
func parkOf(t *testing.T, h *harness) eventlog.Park {
	t.Helper()
	p, ok := eventlog.Parked(h.j.Events())
	if !ok {
		t.Fatalf("the turn is not parked: %v", h.types())
	}
	return p
}

func appendEv(t *testing.T, h *harness, p eventlog.Payload) {
	t.Helper()
	if _, err := h.j.Append(context.Background(), func(eventlog.Head) ([]eventlog.NewEvent, error) {
		return []eventlog.NewEvent{eventlog.Of(p)}, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestE6_ApprovalParksAndResumes: an ask parks the turn (turn/parked names the approval, with
// its deadline; no step/end, no turn/end; Serve returns), and a new runner resumes it once the
// answer is in the log: turn/resumed, the call's result, request/header reason resume, then the
// turn completes.
func TestE6_ApprovalParksAndResumes(t *testing.T) {
	t.Parallel()
	h := parkHarness(t)
	h.post(eventlog.InboxNextTurn, `tool:echo args:{"text":"hi"}`)
	before := time.Now()
	if r := h.serve(context.Background()); len(r) != 1 || r[0].Kind != EndParked {
		t.Fatalf("reasons %+v", r)
	}
	p := parkOf(t, h)
	a := askedOnce(t, h)
	if p.Reason != eventlog.ParkApproval || len(p.Waits) != 1 || p.Waits[0].ApprovalID != a.ID || p.Waits[0].CallID != a.CallID ||
		p.Waits[0].DeadlineMs < before.Add(time.Minute).UnixMilli() || p.Resolvable() {
		t.Fatalf("park %+v", p)
	}
	if len(h.ofType(eventlog.TypeStepEnd)) != 0 || len(h.ofType(eventlog.TypeTurnEnd)) != 0 {
		t.Fatalf("a parked turn wrote its ends: %v", h.types())
	}
	h.checkInvariants()
	// A runner that finds the park unanswered does nothing.
	if r := h.serve(context.Background()); len(r) != 0 {
		t.Fatalf("an unanswered park was served: %+v", r)
	}
	if _, err := approval.Answer(context.Background(), h.j, readAll(h.j), a.ID, eventlog.ApprovalAllowedOnce, ""); err != nil {
		t.Fatal(err)
	}
	if r := h.serve(context.Background()); len(r) != 1 || r[0].Kind != eventlog.EndCompleted {
		t.Fatalf("resumed %+v: %v", r, h.types())
	}
	rs := results(t, h)
	if len(rs) != 1 || rs[0].Message.Content[0].Content[0].Text != "hi" {
		t.Fatalf("results %+v", rs)
	}
	if !subsequence(h.types(), []string{"approval/asked", "turn/parked", "approval/decided", "turn/resumed", "tool/result", "step/end",
		"request/header", "assistant/message", "step/end", "turn/end"}) {
		t.Fatalf("log %v", h.types())
	}
	if got := headerReasons(t, h); len(got) != 2 || got[0] != "initial" || got[1] != "resume" {
		t.Fatalf("request/header reasons %v", got)
	}
	if len(h.ofType(eventlog.TypeToolCall)) != 1 {
		t.Fatalf("the resumed call's tool/call was written again: %v", h.types())
	}
	h.checkInvariants()
}

// TestE6_ClientCallsParkAndResumeInAnyOrder: two client calls of one step form one group; the
// turn parks on both, stays parked while one is answered, and resumes when the last one is; each
// result goes through finalize (its content, an error result's text), in model order.
func TestE6_ClientCallsParkAndResumeInAnyOrder(t *testing.T) {
	t.Parallel()
	h := parkHarness(t)
	h.post(eventlog.InboxNextTurn, `tool:alert tools:2 args:{"text":"x"}`)
	if r := h.serve(context.Background()); r[0].Kind != EndParked {
		t.Fatalf("reasons %+v", r)
	}
	p := parkOf(t, h)
	if p.Reason != eventlog.ParkClient || len(p.Waits) != 2 || p.Waits[0].Kind != eventlog.ParkClient || p.Waits[0].DeadlineMs == 0 {
		t.Fatalf("park %+v", p)
	}
	if len(h.ofType(eventlog.TypeToolCall)) != 2 || len(h.ofType(eventlog.TypeToolResult)) != 0 {
		t.Fatalf("log %v", h.types())
	}
	first, second := p.Waits[0].CallID, p.Waits[1].CallID
	appendEv(t, h, eventlog.ClientResult{CallID: second, Content: []llm.Block{llm.TextBlock("denied by user")}, IsError: true})
	if r := h.serve(context.Background()); len(r) != 0 {
		t.Fatalf("served with one answer of two: %+v", r)
	}
	appendEv(t, h, eventlog.ClientResult{CallID: first, Content: []llm.Block{llm.TextBlock("shown")}})
	if r := h.serve(context.Background()); r[0].Kind != eventlog.EndCompleted {
		t.Fatalf("resumed %+v: %v", r, h.types())
	}
	rs := results(t, h)
	if len(rs) != 2 || rs[0].Message.Source.CallID != first || rs[0].Message.Content[0].Content[0].Text != "shown" ||
		rs[1].Message.Source.CallID != second || !rs[1].Message.Content[0].IsError ||
		rs[1].Message.Content[0].Content[0].Text != "Error: denied by user" {
		t.Fatalf("results %+v", rs)
	}
	h.checkInvariants()
}

// TestE6_ClientTimeoutAndCancelWhileParked: a client call's timed-out result is TOOL_TIMEOUT (E2);
// a cancel of a parked turn ends it aborted, the waiting client call ABORTED and a parked ask
// decided cancelled (its call ABORTED_BEFORE_DISPATCH), with no model call after it.
func TestE6_ClientTimeoutAndCancelWhileParked(t *testing.T) {
	t.Parallel()
	t.Run("timeout", func(t *testing.T) {
		h := parkHarness(t)
		h.post(eventlog.InboxNextTurn, `tool:alert args:{"text":"x"}`)
		h.serve(context.Background())
		appendEv(t, h, eventlog.ClientResult{CallID: parkOf(t, h).Waits[0].CallID, TimedOut: true})
		if r := h.serve(context.Background()); r[0].Kind != eventlog.EndCompleted {
			t.Fatalf("reasons %+v", r)
		}
		if rs := results(t, h); code(rs[0]) != fault.CodeToolTimeout || rs[0].Message.Content[0].Content[0].Text != "Error: tool call timed out after 60000ms" {
			t.Fatalf("result %+v", rs[0])
		}
		h.checkInvariants()
	})
	for _, tc := range []struct{ script, want string }{
		{`tool:alert args:{"text":"x"}`, fault.CodeAborted},
		{`tool:echo args:{"text":"x"}`, fault.CodeAbortedBeforeDispatch},
	} {
		t.Run(tc.want, func(t *testing.T) {
			h := parkHarness(t)
			h.post(eventlog.InboxNextTurn, tc.script)
			h.serve(context.Background())
			parkOf(t, h)
			if _, err := h.j.Append(context.Background(), func(hd eventlog.Head) ([]eventlog.NewEvent, error) {
				return CancelEvents(hd, Cause{Kind: eventlog.CauseUser}, false), nil
			}); err != nil {
				t.Fatal(err)
			}
			models := len(h.ofType(eventlog.TypeAssistantMessage))
			if r := h.serve(context.Background()); r[0].Kind != eventlog.EndAborted {
				t.Fatalf("reasons %+v: %v", r, h.types())
			}
			if rs := results(t, h); len(rs) != 1 || code(rs[0]) != tc.want {
				t.Fatalf("results %+v", rs)
			}
			if len(h.ofType(eventlog.TypeAssistantMessage)) != models {
				t.Fatalf("the model was called after the cancel: %v", h.types())
			}
			if len(approval.Pending(h.j.Events())) != 0 {
				t.Fatalf("an ask was left pending: %v", h.types())
			}
			h.checkInvariants()
		})
	}
}

// TestE6_NoParkWithoutParkConfig: a runner without Config.Park never parks: a client tool fails
// server-side with a clear error, and the turn completes.
func TestE6_NoParkWithoutParkConfig(t *testing.T) {
	t.Parallel()
	h := parkHarness(t)
	h.cfg.Park = nil
	h.post(eventlog.InboxNextTurn, `tool:alert args:{"text":"x"}`)
	if r := h.serve(context.Background()); r[0].Kind != eventlog.EndCompleted {
		t.Fatalf("reasons %+v", r)
	}
	if rs := results(t, h); !rs[0].Message.Content[0].IsError {
		t.Fatalf("result %+v", rs[0])
	}
	if len(h.ofType(eventlog.TypeTurnParked)) != 0 {
		t.Fatal("parked without Park")
	}
}

// TestE6_AskOfAClientCallParksTwice: in a group of three client calls whose second asks, the
// turn parks on the first call's result and the ask (nothing after the ask starts, SCHED-3);
// once both are answered it resumes, the approved call and the third wait for the client, and
// the turn parks again in the same step; the last answers complete it, results in model order.
func TestE6_AskOfAClientCallParksTwice(t *testing.T) {
	t.Parallel()
	h := parkHarness(t)
	var prepares atomic.Int32
	if _, err := kernel.Listen(h.k.Fiber("ask-second", nil), h.reg.Hooks.PreExecute,
		func(ctx context.Context, e *registry.Execution, next func(context.Context) (registry.Decision, error)) (registry.Decision, error) {
			if e.Name == "alert" && prepares.Add(1) == 2 {
				return registry.Ask("the second alert needs a person"), nil
			}
			return next(ctx)
		}); err != nil {
		t.Fatal(err)
	}
	h.post(eventlog.InboxNextTurn, `tool:alert tools:3 args:{"text":"x"}`)
	h.serve(context.Background())
	p := parkOf(t, h)
	if p.Reason != eventlog.ParkApproval || len(p.Waits) != 2 || p.Waits[0].Kind != eventlog.ParkClient || p.Waits[1].Kind != eventlog.ParkApproval {
		t.Fatalf("first park %+v", p)
	}
	if n := len(h.ofType(eventlog.TypeToolCall)); n != 2 {
		t.Fatalf("%d tool/calls before the first park, want 2 (nothing starts after an ask)", n)
	}
	c1, c2 := p.Waits[0].CallID, p.Waits[1].CallID
	appendEv(t, h, eventlog.ClientResult{CallID: c1, Content: []llm.Block{llm.TextBlock("one")}})
	if _, err := approval.Answer(context.Background(), h.j, readAll(h.j), p.Waits[1].ApprovalID, eventlog.ApprovalAllowedOnce, ""); err != nil {
		t.Fatal(err)
	}
	if r := h.serve(context.Background()); r[0].Kind != EndParked {
		t.Fatalf("second serve %+v: %v", r, h.types())
	}
	p = parkOf(t, h)
	if p.Reason != eventlog.ParkClient || len(p.Waits) != 2 || p.Waits[0].CallID != c2 || p.Step != 1 {
		t.Fatalf("second park %+v", p)
	}
	c3 := p.Waits[1].CallID
	appendEv(t, h, eventlog.ClientResult{CallID: c3, Content: []llm.Block{llm.TextBlock("three")}})
	appendEv(t, h, eventlog.ClientResult{CallID: c2, Content: []llm.Block{llm.TextBlock("two")}})
	if r := h.serve(context.Background()); r[0].Kind != eventlog.EndCompleted {
		t.Fatalf("third serve %+v: %v", r, h.types())
	}
	rs := results(t, h)
	want := []string{c1, c2, c3}
	for i, text := range []string{"one", "two", "three"} {
		if rs[i].Message.Source.CallID != want[i] || rs[i].Message.Content[0].Content[0].Text != text {
			t.Fatalf("results %+v", rs)
		}
	}
	if prepares.Load() != 3 {
		t.Fatalf("%d pre-executes, want 3 (a resumed call is not asked again)", prepares.Load())
	}
	if got := headerReasons(t, h); len(got) != 2 || got[1] != "resume" {
		t.Fatalf("request/header reasons %v", got)
	}
	h.checkInvariants()
}

// TestE6_CancelBeforeTheParkIsWritten: a cancel folded while the step's calls are prepared (before
// turn/parked would be written) does not leave a park nobody answers: the waiting calls get their
// cancellation results at once and the turn ends aborted.
func TestE6_CancelBeforeTheParkIsWritten(t *testing.T) {
	t.Parallel()
	h := parkHarness(t)
	r := NewRunner(h.cfg, h.j)
	var prepares atomic.Int32
	if _, err := kernel.Listen(h.k.Fiber("cancel-in-prepare", nil), h.reg.Hooks.PreExecute,
		func(ctx context.Context, e *registry.Execution, next func(context.Context) (registry.Decision, error)) (registry.Decision, error) {
			if prepares.Add(1) == 2 { // the first call already waits for the client
				r.Interrupt(Cause{Kind: eventlog.CauseUser})
			}
			return next(ctx)
		}); err != nil {
		t.Fatal(err)
	}
	h.post(eventlog.InboxNextTurn, `tool:alert tools:2 args:{"text":"x"}`)
	reasons, err := r.Serve(context.Background())
	if err != nil || len(reasons) != 1 || reasons[0].Kind != eventlog.EndAborted {
		t.Fatalf("reasons %+v %v: %v", reasons, err, h.types())
	}
	if len(h.ofType(eventlog.TypeTurnParked)) != 0 {
		t.Fatalf("parked after a cancel: %v", h.types())
	}
	if rs := results(t, h); len(rs) != 2 || code(rs[0]) != fault.CodeAborted || code(rs[1]) != fault.CodeAbortedBeforeDispatch {
		t.Fatalf("results %+v", rs)
	}
	if n := len(h.ofType(eventlog.TypeToolCall)); n != 2 {
		t.Fatalf("%d tool/calls, want 2", n)
	}
	h.checkInvariants()
}

// onCall runs f before the n-th model call (1-based) it streams.
type onCall struct {
	p     llm.Provider
	n     int
	f     func()
	calls atomic.Int32
}

func (p *onCall) Stream(ctx context.Context, req llm.Request) (llm.Stream, error) {
	if int(p.calls.Add(1)) == p.n {
		p.f()
	}
	return p.p.Stream(ctx, req)
}

// TestE6_HandoverAtAStepBoundary: a runner asked to hand over finishes the step it is in, commits
// turn/parked (reason handover, naming the step that ended) and stops; another runner resumes the
// turn with the next step, and every step's model request is made exactly once.
func TestE6_HandoverAtAStepBoundary(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.cfg.Park = &ParkConfig{}
	var r *Runner
	oc := &onCall{p: h.cfg.Provider, n: 2, f: func() { r.Handover() }}
	h.cfg.Provider = oc
	r = NewRunner(h.cfg, h.j)
	h.post(eventlog.InboxNextTurn, `tools:1 steps:3`)
	reasons, err := r.Serve(context.Background())
	if err != nil || len(reasons) != 1 || reasons[0].Kind != EndParked {
		t.Fatalf("reasons %+v %v", reasons, err)
	}
	p := parkOf(t, h)
	if p.Reason != eventlog.ParkHandover || p.Step != 2 || !p.Resolvable() || len(h.ofType(eventlog.TypeStepEnd)) != 2 {
		t.Fatalf("park %+v: %v", p, h.types())
	}
	h.checkInvariants()
	if reasons := h.serve(context.Background()); len(reasons) != 1 || reasons[0].Kind != eventlog.EndCompleted {
		t.Fatalf("resumed %+v: %v", reasons, h.types())
	}
	if n := oc.calls.Load(); n != 4 {
		t.Fatalf("%d model calls, want 4 (three tool steps and the answer, each once)", n)
	}
	if n := len(results(t, h)); n != 3 {
		t.Fatalf("%d tool results, want 3", n)
	}
	if got := headerReasons(t, h); len(got) != 2 || got[1] != "resume" {
		t.Fatalf("request/header reasons %v", got)
	}
	h.checkInvariants()
}

// renaming gives the calls of each model response the names it lists, by position (the scripted
// model names every call of a response alike).
type renaming struct {
	p     llm.Provider
	names []string
}

func (p renaming) Stream(ctx context.Context, req llm.Request) (llm.Stream, error) {
	s, err := p.p.Stream(ctx, req)
	if err != nil {
		return nil, err
	}
	return &renamedStream{Stream: s, names: p.names, ids: map[string]string{}}, nil
}

type renamedStream struct {
	llm.Stream
	names []string
	ids   map[string]string // call id -> new name
}

func (s *renamedStream) Recv() (llm.Chunk, error) {
	c, err := s.Stream.Recv()
	if err != nil {
		return c, err
	}
	if c.ID != "" && c.Name != "" {
		if _, ok := s.ids[c.ID]; !ok && len(s.ids) < len(s.names) {
			s.ids[c.ID] = s.names[len(s.ids)]
		}
		if n := s.ids[c.ID]; n != "" {
			c.Name = n
		}
	}
	if c.Block != nil && c.Block.Type == llm.BlockToolCall {
		if n := s.ids[c.Block.ID]; n != "" {
			b := *c.Block
			b.Name = n
			c.Block = &b
		}
	}
	return c, nil
}

// TestE6_NothingAfterAClientGroupStartsBeforeThePark: in a step [client, server], the server call
// (its own group, SCHED-2) does not start before the client call has its result: the turn parks
// with only the client call started, and on resume the server call runs once.
func TestE6_NothingAfterAClientGroupStartsBeforeThePark(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	count := &registry.Tool{Name: "count", Description: "counts", Parameters: json.RawMessage(`{"type":"object"}`),
		Output: &registry.Output{Render: func(_, v json.RawMessage) ([]llm.Block, error) { return []llm.Block{llm.TextBlock(string(v))}, nil }},
		Execute: func(context.Context, *registry.Execution) (json.RawMessage, error) {
			runs.Add(1)
			return json.RawMessage(`"counted"`), nil
		}}
	h := parkHarness(t)
	if _, err := h.reg.Register(h.k.Fiber("count", nil), count); err != nil {
		t.Fatal(err)
	}
	h.cfg.Provider = renaming{p: h.cfg.Provider, names: []string{"alert", "count"}}
	h.post(eventlog.InboxNextTurn, `tool:alert tools:2 args:{}`)
	h.serve(context.Background())
	p := parkOf(t, h)
	if len(p.Waits) != 1 || runs.Load() != 0 || len(h.ofType(eventlog.TypeToolCall)) != 1 {
		t.Fatalf("park %+v, count ran %d times: %v", p, runs.Load(), h.types())
	}
	appendEv(t, h, eventlog.ClientResult{CallID: p.Waits[0].CallID, Content: []llm.Block{llm.TextBlock("shown")}})
	if r := h.serve(context.Background()); r[0].Kind != eventlog.EndCompleted {
		t.Fatalf("resumed %+v: %v", r, h.types())
	}
	if runs.Load() != 1 {
		t.Fatalf("count ran %d times, want 1", runs.Load())
	}
	rs := results(t, h)
	if len(rs) != 2 || rs[0].Message.Content[0].Content[0].Text != "shown" || rs[1].Message.Content[0].Content[0].Text != `"counted"` {
		t.Fatalf("results %+v", rs)
	}
	h.checkInvariants()
}
