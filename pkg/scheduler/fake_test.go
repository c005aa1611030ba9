package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
)

// trace is the shared, ordered record of what the fake pipeline and the fake emitter saw.
// Entries are "<what>:<callId>", for example "call:c1", "prep:c1", "body:c1", "settle:c1",
// "final:c1", "finish:c1", "result:c1", "ctx:c1", and "flush".
type trace struct {
	mu sync.Mutex
	ev []string
}

func (tr *trace) add(e string) {
	tr.mu.Lock()
	tr.ev = append(tr.ev, e)
	tr.mu.Unlock()
}

func (tr *trace) all() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.ev)
}

// index returns the position of e in the trace, or -1.
func (tr *trace) index(e string) int { return slices.Index(tr.all(), e) }

// only returns the trace entries whose prefix (before ':') is one of kinds, in order.
func (tr *trace) only(kinds ...string) []string {
	var out []string
	for _, e := range tr.all() {
		for _, k := range kinds {
			if len(e) > len(k) && e[:len(k)+1] == k+":" || e == k {
				out = append(out, e)
			}
		}
	}
	return out
}

// spec is the behaviour of one fake call, keyed by call id.
type spec struct {
	exclusive  bool
	modeFunc   func() registry.Mode // overrides exclusive when set
	kind       registry.PrepKind    // what Prepare decides (default PrepDispatch)
	gated      bool                 // the body waits for release(id)
	prepGated  bool                 // Prepare waits for releasePrep(id)
	honourCtx  bool                 // a gated body also returns when the step signal aborts
	panicAt    string               // "mode", "prepare", "dispatch", "finalize", "finish"
	nilAt      string               // "prepare", "dispatch", "finalize": return nil there
	contexts   []llm.Message
	concludes  bool
	bodyFailed bool
}

// fakePipe is a Pipeline whose behaviour per call comes from specs. It records what it does in
// the trace and counts concurrently running bodies.
type fakePipe struct {
	t  testing.TB
	tr *trace

	mu         sync.Mutex
	specs      map[string]*spec
	gates      map[string]chan struct{}
	preps      map[*registry.Prepared]registry.Input
	settles    map[*registry.Settled]registry.Input
	inputs     []registry.Input
	modes      []string
	running    int
	maxRunning int
	laneBusy   int32

	started    chan string // every body start, buffered
	onDispatch func(id string)
}

func newFakePipe(t testing.TB, tr *trace) *fakePipe {
	return &fakePipe{
		t: t, tr: tr,
		specs:   map[string]*spec{},
		gates:   map[string]chan struct{}{},
		preps:   map[*registry.Prepared]registry.Input{},
		settles: map[*registry.Settled]registry.Input{},
		started: make(chan string, 1024),
	}
}

func (f *fakePipe) spec(id string) *spec {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.specs[id]; ok {
		return s
	}
	return &spec{}
}

func (f *fakePipe) gate(key string) chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.gates[key]
	if !ok {
		g = make(chan struct{})
		f.gates[key] = g
	}
	return g
}

// release lets the gated body of call id return.
func (f *fakePipe) release(id string) { close(f.gate("body:" + id)) }

// releasePrep lets the gated Prepare of call id return.
func (f *fakePipe) releasePrep(id string) { close(f.gate("prep:" + id)) }

// enterLane checks that no two lane stages (classify, prepare, finalize, finish) overlap.
func (f *fakePipe) enterLane(stage string) func() {
	if !atomic.CompareAndSwapInt32(&f.laneBusy, 0, 1) {
		f.t.Errorf("%s overlaps another lane stage", stage)
	}
	return func() { atomic.StoreInt32(&f.laneBusy, 0) }
}

func (f *fakePipe) ExecutionMode(in registry.Input) registry.Mode {
	defer f.enterLane("executionMode")()
	f.mu.Lock()
	f.modes = append(f.modes, in.CallID)
	f.mu.Unlock()
	f.tr.add("mode:" + in.CallID)
	s := f.spec(in.CallID)
	if s.panicAt == "mode" {
		panic("classifier exploded")
	}
	if s.modeFunc != nil {
		return s.modeFunc()
	}
	if s.exclusive {
		return registry.Exclusive
	}
	return registry.Parallel
}

func (f *fakePipe) Prepare(ctx context.Context, in registry.Input) *registry.Prepared {
	defer f.enterLane("prepare")()
	s := f.spec(in.CallID)
	f.tr.add("prep:" + in.CallID)
	f.mu.Lock()
	f.inputs = append(f.inputs, in)
	f.mu.Unlock()
	if s.prepGated {
		<-f.gate("prep:" + in.CallID)
	}
	defer f.tr.add("prepared:" + in.CallID)
	switch {
	case s.panicAt == "prepare":
		panic(errors.New("pre-execute exploded"))
	case s.nilAt == "prepare":
		return nil
	}
	p := &registry.Prepared{Kind: s.kind}
	if ctx.Err() != nil { // PIPE-3 / PIPE-7
		p = &registry.Prepared{Kind: registry.PrepPostResult}
	}
	f.mu.Lock()
	f.preps[p] = in
	f.mu.Unlock()
	return p
}

func (f *fakePipe) input(p *registry.Prepared) registry.Input {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, ok := f.preps[p]
	if !ok {
		f.t.Errorf("unknown Prepared %p", p)
	}
	return in
}

func (f *fakePipe) Dispatch(ctx context.Context, p *registry.Prepared) *registry.Settled {
	in := f.input(p)
	if p.Kind != registry.PrepDispatch {
		f.t.Errorf("Dispatch of %s with kind %v", in.CallID, p.Kind)
	}
	if f.onDispatch != nil {
		f.onDispatch(in.CallID)
	}
	s := f.spec(in.CallID)
	f.mu.Lock()
	f.running++
	f.maxRunning = max(f.maxRunning, f.running)
	f.mu.Unlock()
	f.tr.add("body:" + in.CallID)
	f.started <- in.CallID
	defer func() {
		f.mu.Lock()
		f.running--
		f.mu.Unlock()
		f.tr.add("settle:" + in.CallID)
	}()
	if s.gated {
		var done <-chan struct{}
		if s.honourCtx {
			done = ctx.Done()
		}
		select {
		case <-f.gate("body:" + in.CallID):
		case <-done:
		}
	}
	switch {
	case s.panicAt == "dispatch":
		panic(fmt.Sprintf("body of %s exploded", in.CallID))
	case s.nilAt == "dispatch":
		return nil
	}
	st := &registry.Settled{}
	f.mu.Lock()
	f.settles[st] = in
	f.mu.Unlock()
	return st
}

func (f *fakePipe) Finalize(ctx context.Context, st *registry.Settled) *registry.Result {
	defer f.enterLane("finalize")()
	f.mu.Lock()
	in, ok := f.settles[st]
	f.mu.Unlock()
	if !ok {
		f.t.Errorf("unknown Settled %p", st)
	}
	f.tr.add("final:" + in.CallID)
	s := f.spec(in.CallID)
	switch {
	case s.panicAt == "finalize":
		panic("post-execute exploded")
	case s.nilAt == "finalize":
		return nil
	case s.bodyFailed:
		return failureResult("failed " + in.CallID)
	case ctx.Err() != nil: // PIPE-14: the body started, the step was aborted
		return &registry.Result{IsError: true, Content: []llm.Block{llm.TextBlock("Error: tool call aborted")},
			Error:              &registry.ToolError{Message: "tool call aborted", Info: &fault.Info{Name: "AbortError", Code: fault.CodeAborted}},
			AdditionalContexts: s.contexts}
	}
	return &registry.Result{
		Value:              json.RawMessage(fmt.Sprintf("%q", in.CallID)),
		Content:            []llm.Block{llm.TextBlock(in.CallID)},
		AdditionalContexts: s.contexts,
		ConcludesTurn:      s.concludes,
	}
}

func (f *fakePipe) Finish(ctx context.Context, p *registry.Prepared) *registry.Result {
	defer f.enterLane("finish")()
	in := f.input(p)
	f.tr.add("finish:" + in.CallID)
	if f.spec(in.CallID).panicAt == "finish" {
		panic("finish exploded")
	}
	if ctx.Err() != nil {
		return registry.AbortedBeforeDispatchResult()
	}
	return failureResult("denied " + in.CallID)
}

// fakeEmitter records emitted events in the trace and checks the Emitter calling discipline.
type fakeEmitter struct {
	t  testing.TB
	tr *trace

	busy     atomic.Bool
	mu       sync.Mutex
	seq      int64
	callSeq  map[string]int64
	cited    map[string]int64
	results  map[string]*registry.Result
	contexts map[string][]llm.Message
	pending  map[string]bool // tool/calls emitted but not flushed
	failOn   string          // trace entry whose emission fails
	calls    int             // emitter calls made
}

var errEmit = errors.New("append failed")

func newFakeEmitter(t testing.TB, tr *trace) *fakeEmitter {
	return &fakeEmitter{t: t, tr: tr, callSeq: map[string]int64{}, cited: map[string]int64{},
		results: map[string]*registry.Result{}, contexts: map[string][]llm.Message{}, pending: map[string]bool{}}
}

// enter checks one-at-a-time use and the detached context, records e and reports injected failure.
func (e *fakeEmitter) enter(ctx context.Context, ev string) (func(), error) {
	if !e.busy.CompareAndSwap(false, true) {
		e.t.Errorf("concurrent emitter call: %s", ev)
	}
	if ctx.Err() != nil {
		e.t.Errorf("emitter got a cancelled context for %s", ev)
	}
	e.mu.Lock()
	e.calls++
	e.mu.Unlock()
	done := func() { e.busy.Store(false) }
	if ev == e.failOn {
		e.tr.add("fail:" + ev)
		return done, errEmit
	}
	e.tr.add(ev)
	return done, nil
}

func (e *fakeEmitter) ToolCall(ctx context.Context, c Call) (int64, error) {
	done, err := e.enter(ctx, "call:"+c.ID)
	defer done()
	if err != nil {
		return 0, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seq++
	e.callSeq[c.ID] = e.seq
	e.pending[c.ID] = true
	return e.seq, nil
}

func (e *fakeEmitter) ToolResult(ctx context.Context, c Call, callSeq int64, r *registry.Result) error {
	done, err := e.enter(ctx, "result:"+c.ID)
	defer done()
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seq++
	e.cited[c.ID] = callSeq
	e.results[c.ID] = r
	return nil
}

func (e *fakeEmitter) Contexts(ctx context.Context, c Call, msgs []llm.Message) error {
	done, err := e.enter(ctx, "ctx:"+c.ID)
	defer done()
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		e.t.Errorf("Contexts(%s) with no messages", c.ID)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seq++
	e.contexts[c.ID] = msgs
	return nil
}

func (e *fakeEmitter) Flush(ctx context.Context) error {
	done, err := e.enter(ctx, "flush")
	defer done()
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	clear(e.pending)
	return nil
}

// durable reports whether the tool/call of id has been flushed.
func (e *fakeEmitter) durable(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, emitted := e.callSeq[id]
	return emitted && !e.pending[id]
}

func (e *fakeEmitter) emitterCalls() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls
}

// harness wires a scheduler to a fake pipeline and a fake emitter sharing one trace.
type harness struct {
	t     *testing.T
	tr    *trace
	pipe  *fakePipe
	em    *fakeEmitter
	sched *Scheduler
	waits chan struct{}   // one signal each time the lane blocks waiting for a body
	seen  map[string]bool // bodies seen starting; used by the test goroutine only
	logs  *syncBuffer
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := &harness{t: t, tr: &trace{}, seen: map[string]bool{}, waits: make(chan struct{}, 4096), logs: &syncBuffer{}}
	h.pipe = newFakePipe(t, h.tr)
	h.em = newFakeEmitter(t, h.tr)
	h.pipe.onDispatch = func(id string) {
		if !h.em.durable(id) {
			t.Errorf("body of %s started before its tool/call was flushed", id)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(h.logs, nil))
	}
	h.sched = New(h.pipe, cfg)
	h.sched.onWait = func() { h.waits <- struct{}{} }
	return h
}

func (h *harness) set(id string, s spec) {
	h.pipe.mu.Lock()
	h.pipe.specs[id] = &s
	h.pipe.mu.Unlock()
}

type stepReturn struct {
	out Outcome
	err error
}

// start runs the step on a goroutine and returns the channel its return arrives on.
func (h *harness) start(ctx context.Context, ids ...string) <-chan stepReturn {
	ch := make(chan stepReturn, 1)
	calls := callsOf(ids...)
	go func() {
		out, err := h.sched.RunStep(ctx, testStep, calls, h.em)
		ch <- stepReturn{out, err}
	}()
	return ch
}

// run runs the step to completion on the test goroutine.
func (h *harness) run(ctx context.Context, ids ...string) (Outcome, error) {
	return h.sched.RunStep(ctx, testStep, callsOf(ids...), h.em)
}

// awaitStarted blocks until the bodies of ids (in any order) have started.
func (h *harness) awaitStarted(ids ...string) {
	h.t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	for id := range want {
		if h.seen[id] {
			delete(want, id)
		}
	}
	for len(want) > 0 {
		id := <-h.pipe.started
		h.seen[id] = true
		delete(want, id)
	}
}

// awaitWait blocks until the lane blocks waiting for a body.
func (h *harness) awaitWait() { <-h.waits }

var testStep = Step{Turn: 3, Step: 2, Agent: "agent-1", Scope: "scope-1"}

func callsOf(ids ...string) []Call {
	calls := make([]Call, len(ids))
	for i, id := range ids {
		calls[i] = Call{ID: id, Name: "tool-" + id, Arguments: fmt.Sprintf(`{"id":%q}`, id)}
	}
	return calls
}

// syncBuffer is a concurrency-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

var _ io.Writer = (*syncBuffer)(nil)

func resultIDs(out Outcome) []string {
	ids := make([]string, len(out.Results))
	for i, r := range out.Results {
		ids[i] = r.Call.ID
	}
	return ids
}

func codeOf(r *registry.Result) string {
	if info := r.ErrorInfo(); info != nil {
		return info.Code
	}
	return ""
}
