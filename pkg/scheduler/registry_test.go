package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
)

// The real registry satisfies the scheduler's Pipeline.
var _ Pipeline = (*registry.Registry)(nil)

// regHarness runs the scheduler over a real registry with two small tools: `p` (parallel-safe)
// and `x` (exclusive). Their bodies return the call id, record body/settle in the trace and, for
// gated calls, wait for release(id) or the body's signal.
type regHarness struct {
	t     *testing.T
	tr    *trace
	em    *fakeEmitter
	reg   *registry.Registry
	fiber *kernel.Fiber
	sched *Scheduler
	waits chan struct{}

	mu         sync.Mutex
	gated      map[string]bool
	gates      map[string]chan struct{}
	running    int
	maxRunning int
	started    chan string
	seen       map[string]bool
	preCalls   int
}

func newRegHarness(t *testing.T, cfg Config) *regHarness {
	t.Helper()
	k := kernel.New(nil)
	reg, err := registry.New(registry.Config{Scopes: k.Scopes()})
	if err != nil {
		t.Fatal(err)
	}
	h := &regHarness{t: t, tr: &trace{}, reg: reg, fiber: k.Fiber("global", nil), waits: make(chan struct{}, 4096),
		gated: map[string]bool{}, gates: map[string]chan struct{}{}, started: make(chan string, 1024), seen: map[string]bool{}}
	h.em = newFakeEmitter(t, h.tr)
	for _, name := range []string{"p", "x"} {
		tool := &registry.Tool{
			Name:       name,
			Parameters: json.RawMessage(`{"type":"object"}`),
			Output:     &registry.Output{Render: renderText},
			Execute:    h.body,
		}
		if name == "p" {
			tool.IsConcurrencySafe = func(json.RawMessage) bool { return true }
		}
		if _, err := reg.Register(h.fiber, tool); err != nil {
			t.Fatal(err)
		}
	}
	_, err = kernel.Listen(h.fiber, reg.Hooks.PreExecute, func(ctx context.Context, e *registry.Execution, next func(context.Context) (registry.Decision, error)) (registry.Decision, error) {
		h.mu.Lock()
		h.preCalls++
		h.mu.Unlock()
		return next(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	h.sched = New(reg, cfg)
	h.sched.onWait = func() { h.waits <- struct{}{} }
	return h
}

func renderText(_, value json.RawMessage) ([]llm.Block, error) {
	var s string
	if err := json.Unmarshal(value, &s); err != nil {
		return nil, err
	}
	return []llm.Block{llm.TextBlock(s)}, nil
}

func (h *regHarness) gate(id string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	g, ok := h.gates[id]
	if !ok {
		g = make(chan struct{})
		h.gates[id] = g
	}
	return g
}

func (h *regHarness) body(ctx context.Context, e *registry.Execution) (json.RawMessage, error) {
	id := e.CallID
	h.mu.Lock()
	h.running++
	h.maxRunning = max(h.maxRunning, h.running)
	gated := h.gated[id]
	h.mu.Unlock()
	h.tr.add("body:" + id)
	h.started <- id
	defer func() {
		h.mu.Lock()
		h.running--
		h.mu.Unlock()
		h.tr.add("settle:" + id)
	}()
	if gated {
		select {
		case <-h.gate(id):
		case <-ctx.Done():
		}
	}
	return json.RawMessage(fmt.Sprintf("%q", id)), nil
}

func (h *regHarness) gateAll(ids ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		h.gated[id] = true
	}
}

func (h *regHarness) release(id string) { close(h.gate(id)) }

func (h *regHarness) awaitStarted(ids ...string) {
	h.t.Helper()
	for _, id := range ids {
		for !h.seen[id] {
			h.seen[<-h.started] = true
		}
	}
}

func (h *regHarness) awaitWait() { <-h.waits }

// calls builds calls named by their tool: "p1" calls p, "x" calls x.
func regCalls(ids ...string) []Call {
	calls := make([]Call, len(ids))
	for i, id := range ids {
		calls[i] = Call{ID: id, Name: id[:1], Arguments: `{}`}
	}
	return calls
}

func (h *regHarness) start(ctx context.Context, ids ...string) <-chan stepReturn {
	ch := make(chan stepReturn, 1)
	go func() {
		out, err := h.sched.RunStep(ctx, Step{Turn: 1, Step: 1, Agent: "a"}, regCalls(ids...), h.em)
		ch <- stepReturn{out, err}
	}()
	return ch
}

func TestSCHED1_RealRegistryInvalidArgumentsFailDefineTool(t *testing.T) {
	t.Parallel()
	k := kernel.New(nil)
	reg, err := registry.New(registry.Config{Scopes: k.Scopes()})
	if err != nil {
		t.Fatal(err)
	}
	type echoArgs struct {
		Text string `json:"text"`
	}
	tool, err := registry.Define(registry.DefineSpec[echoArgs, string]{Name: "echo"},
		func(_ context.Context, _ *registry.Execution, a echoArgs) (string, error) { return a.Text, nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Register(k.Fiber("g", nil), tool); err != nil {
		t.Fatal(err)
	}
	tr := &trace{}
	em := newFakeEmitter(t, tr)
	calls := []Call{{ID: "c1", Name: "echo", Arguments: `{"text":`}, {ID: "c2", Name: "echo", Arguments: `{"text":"hi"}`}}
	out, err := New(reg, Config{}).RunStep(context.Background(), Step{Turn: 1, Step: 1}, calls, em)
	if err != nil {
		t.Fatal(err)
	}
	if got := codeOf(out.Results[0].Result); got != fault.CodeInvalidArgs {
		t.Errorf("invalid JSON arguments: code %q, want INVALID_ARGS (%+v)", got, out.Results[0].Result.Error)
	}
	if r := out.Results[1].Result; r.IsError || r.Content[0].Text != "hi" {
		t.Errorf("valid call: %+v", r)
	}
}
