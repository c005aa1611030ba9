package codemode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/telemetry"
)

// errRunSettled is the cause the run signal is cancelled with when the program is done (CODE-11).
var errRunSettled = errors.New("run_code settled")

// ImagePlugin is the source plugin of the user message that carries a sub-call's image (CODE-9).
const ImagePlugin = "tools-code-mode"

// bridge connects one run's bindings to the tool pipeline (CODE-4..11): every binding call
// becomes a nested execution of the outer run_code execution, scheduled by the lane.
type bridge struct {
	reg    *registry.Registry
	outer  *registry.Execution
	scope  string
	limit  int
	names  map[string]bool
	hook   *kernel.Waterfall[*registry.Call, []llm.Block]
	log    *slog.Logger
	ctx    context.Context // the run signal: follows the outer signal, cancelled at settlement
	cancel context.CancelCauseFunc
	box    *mailbox
	dlog   *dispatchLog    // nil when the outer call has no agent or no session log
	n      int             // sub-calls numbered so far (engine goroutine)
	loc    json.RawMessage // the JSON of the outer call's location, which every sub-call has
	idBase string          // the sub-call ids' prefix: "<outer call id>:code:"

	metrics *telemetry.Metrics // Config.Metrics: sub-calls are recorded as tool calls

	lane     *lane
	mu       sync.Mutex
	queue    []*subCall // submitted, not started
	closed   bool
	laneDone chan struct{} // closed when the lane ends

	// A call submitted while the lane is idle waits for the end of the program's step (stepped),
	// or for kickAfter (kick, on its own goroutine), whichever comes first: deferred is set
	// while it waits.
	deferred bool
	kick     *time.Timer

	halted atomic.Bool // the run failed (halt)
	busy   atomic.Bool // the engine's goroutine does lane work (stepped)
}

// kickAfter bounds how much later than at its submission a call starts while the program goes
// on computing: past it a worker starts the call, as it did at once before (the engine's
// goroutine starts it when the step ends, which a step that awaits the call does in a few
// microseconds).
const kickAfter = 50 * time.Microsecond

// subCall is one binding call. The worker dispatching it owns set and panicked while the call is
// in flight; the lane's holder owns everything else.
type subCall struct {
	// ctx is the run signal carrying the sub-call's execute_tool span (a child of the run_code
	// call's span; the run signal itself when tracing is off); span is that span.
	ctx     context.Context
	span    trace.Span
	started time.Time // when it started (metrics)

	id       int // the binding's id in the engine
	in       registry.Input
	logged   eventlog.CodeDispatchStart // the payload of its code-dispatch-start, built when it starts
	mode     registry.Mode
	prep     *registry.Prepared
	set      *registry.Settled
	panicked *registry.Result
	done     bool // ready to commit
}

// newBridge starts the lane of a run of outer's program, which may call names.
func newBridge(ctx context.Context, rt *Runtime, reg *registry.Registry, outer *registry.Execution, names []string, limit int) *bridge {
	b := &bridge{reg: reg, outer: outer, scope: outer.Scope.Key(), limit: limit, names: map[string]bool{},
		hook: rt.DispatchLog, metrics: rt.cfg.Metrics, log: rt.cfg.Logger, box: newMailbox(), laneDone: make(chan struct{})}
	b.lane = &lane{b: b}
	for _, n := range names {
		b.names[n] = true
	}
	b.ctx, b.cancel = context.WithCancelCause(ctx)
	b.loc, b.idBase = location(outer.Location), outer.CallID+":code:"
	if outer.Agent != "" && outer.Recorder() != nil {
		b.dlog = newDispatchLog(ctx, outer.Recorder(), limit, rt.cfg.Logger)
	}
	return b
}

func (b *bridge) mailbox() *mailbox { return b.box }

func (b *bridge) logger() *slog.Logger { return b.log }

// submit implements host: it numbers the call (CODE-5) and queues it for the lane, which a worker
// takes unless its holder goes on with it.
func (b *bridge) submit(id int, name string, args json.RawMessage) string {
	if !b.names[name] {
		return fmt.Sprintf("unknown tool %q", name)
	}
	b.n++
	c := &subCall{id: id, in: registry.Input{
		CallID: b.idBase + strconv.Itoa(b.n), Name: name, Args: args,
		Scope: b.scope, Agent: b.outer.Agent, Location: b.outer.Location,
		RootCallID: b.outer.RootCallID, Parent: b.outer.Token(), Log: b.outer.Recorder(),
	}}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return "the run is over: the call to " + name + " was not made"
	}
	b.queue = append(b.queue, c)
	switch {
	case b.lane.held:
		b.lane.dirty = true // its holder starts it
	case !b.deferred:
		b.deferred = true
		if b.kick == nil {
			b.kick = time.AfterFunc(kickAfter, b.kicked)
		} else {
			b.kick.Reset(kickAfter)
		}
	}
	b.mu.Unlock()
	return ""
}

// kicked gives the lane to a worker when the calls submitted in a step still wait after
// kickAfter: the program goes on computing.
func (b *bridge) kicked() {
	b.mu.Lock()
	if b.deferred {
		b.deferred = false
		b.lane.kick()
	}
	b.mu.Unlock()
}

// stepped implements host: it starts the calls the program's step submitted, on the engine's
// goroutine, between two calls into JavaScript (the CPU budget is not charged, and the run holds
// no program slot). When the program waits for them and the last call started is alone in
// flight, with no settlement for the program to take, nothing can happen in the run until that
// call settles: the engine's goroutine then runs its dispatch stage too, and commits it, instead
// of handing it to a worker and waiting to be woken by it (each hand-off wakes a thread). While
// it does this lane work, a failure of the run aborts the run signal at once (halt), as the
// settlement that follows the engine's return would.
func (b *bridge) stepped(waiting bool) {
	b.mu.Lock()
	if !b.deferred {
		b.mu.Unlock()
		return
	}
	b.deferred = false
	b.kick.Stop() // should it run meanwhile, it finds nothing deferred
	l := b.lane
	if !waiting || l.held {
		l.kick()
		b.mu.Unlock()
		return
	}
	b.busy.Store(true)
	defer b.busy.Store(false)
	if b.halted.Load() { // failed meanwhile: as if the engine had returned
		l.kick()
		b.mu.Unlock()
		return
	}
	l.held = true
	b.mu.Unlock()
	c, alone := l.drive(true)
	for c != nil {
		if !alone || !b.box.empty() || b.halted.Load() {
			b.mu.Lock()
			l.give(c)
			b.mu.Unlock()
			return
		}
		l.dispatch(c)
		c, alone = l.settle(c)
	}
}

// halt implements host: the run failed. The engine returns only when the lane work it does is
// over: the run signal is aborted now, as the settlement that follows the return would.
func (b *bridge) halt() {
	b.halted.Store(true)
	if b.busy.Load() {
		b.cancel(errRunSettled)
	}
}

// close settles the run (CODE-11): it cancels the run signal, abandons the calls that have not
// started, waits for the started ones to finish and commit and for the log appends, and returns
// the first failed append.
func (b *bridge) close() error {
	b.cancel(errRunSettled)
	b.mu.Lock()
	b.closed = true
	b.queue = nil
	if b.deferred {
		b.deferred = false
		b.kick.Stop()
	}
	if b.lane.held {
		b.lane.dirty = true // its holder ends it
	} else {
		b.lane.endIfDone() // or the worker whose dispatch settles last
	}
	b.mu.Unlock()
	<-b.laneDone
	if b.dlog != nil {
		return b.dlog.close()
	}
	return nil
}

// peek returns the first queued call, or nil.
func (b *bridge) peek() *subCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		return nil
	}
	return b.queue[0]
}

// pop takes c, the call peek returned, off the queue, and reports whether it was still there:
// close may have abandoned the queue since (the call then never starts).
func (b *bridge) pop(c *subCall) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 || b.queue[0] != c {
		return false
	}
	b.queue = b.queue[1:]
	return true
}

// logStart appends the call's `tool/code-dispatch-start` (CODE-7). Its payload is built once:
// the call's `tool/code-dispatch` repeats it.
func (b *bridge) logStart(c *subCall) {
	if b.dlog != nil {
		c.logged = eventlog.CodeDispatchStart{RootCallID: c.in.RootCallID, ParentCallID: b.outer.CallID,
			SubCallID: c.in.CallID, Name: c.in.Name, Arguments: c.in.Args, Location: b.loc}
		b.dlog.add(c.logged)
	}
}

// commit completes a committed call: the log, the context flow, the program's promise.
func (b *bridge) commit(c *subCall, res *registry.Result) {
	if b.dlog != nil {
		b.dlog.add(eventlog.CodeDispatch{CodeDispatchStart: c.logged, IsError: res.IsError,
			Content: b.loggedContent(c, res), Mutations: res.Mutations})
	}
	b.flow(c, res)
	b.deliver(c, res)
}

// loggedContent passes the content through the tools/code-dispatch-log waterfall; a failing
// listener leaves it unchanged (CODE-7).
func (b *bridge) loggedContent(c *subCall, res *registry.Result) (content []llm.Block) {
	content = res.Content
	if content == nil {
		content = []llm.Block{}
	}
	if b.hook == nil || b.hook.Len() == 0 {
		return content
	}
	orig := content
	defer func() {
		if recover() != nil {
			content = orig
		}
	}()
	var exec *registry.Execution
	if c.prep != nil {
		exec = c.prep.Exec
	}
	out, err := b.hook.Run(b.ctx, b.outer.Scope, &registry.Call{Exec: exec, Result: res})
	if err != nil || out == nil {
		return orig
	}
	return out
}

// flow hands a committed sub-call's contexts to the outer call (CODE-9): its additional
// contexts, an image it returned (as a user message), and its concludesTurn mark.
func (b *bridge) flow(c *subCall, res *registry.Result) {
	for _, m := range res.AdditionalContexts {
		b.outer.DeferContext(m)
	}
	if res.IsError {
		return
	}
	if hasImage(res.Content) {
		blocks := append([]llm.Block{llm.TextBlock(fmt.Sprintf("Image returned by %s (call %s) in the run_code program:", c.in.Name, c.in.CallID))}, res.Content...)
		b.outer.DeferContext(llm.Message{ID: c.in.CallID + ":image", Role: llm.RoleUser, Content: blocks,
			Source: llm.Source{Kind: llm.SourcePlugin, Plugin: ImagePlugin}})
	}
	if res.ConcludesTurn {
		b.outer.ConcludeTurn()
	}
}

func hasImage(blocks []llm.Block) bool {
	for _, bl := range blocks {
		if bl.Type == llm.BlockImage {
			return true
		}
	}
	return false
}

// deliver settles the binding's promise (CODE-8): the final value, or a ToolCallError with the
// failure message. After the run is over the engine no longer reads it: it is discarded.
func (b *bridge) deliver(c *subCall, res *registry.Result) {
	if !res.IsError {
		v := string(res.Value)
		if v == "" {
			v = "null"
		}
		b.box.put(settlement{id: c.id, ok: true, text: v})
		return
	}
	msg := "tool call failed"
	if res.Error != nil {
		msg = res.Error.Message
	}
	b.box.put(settlement{id: c.id, text: msg})
}
