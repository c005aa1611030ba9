package agentloop

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/scheduler"
)

// runTools runs the step's tool calls through the scheduler (SCHED-1..9) and reports whether a committed
// result concluded the turn. An aborted step is reported through ctx, not as an error.
func (r *Runner) runTools(ctx context.Context, turn, step int, blocks []llm.Block) (scheduler.Outcome, error) {
	calls := make([]scheduler.Call, len(blocks))
	for i, b := range blocks {
		calls[i] = scheduler.Call{ID: b.ID, Name: b.Name, Arguments: b.Arguments}
	}
	return r.runCalls(ctx, turn, step, calls)
}

// runCalls runs calls through the scheduler: the calls of a step's assistant message, or of a
// resumed step (their Resume set).
func (r *Runner) runCalls(ctx context.Context, turn, step int, calls []scheduler.Call) (scheduler.Outcome, error) {
	em := &stepEmitter{r: r, turn: turn, step: step}
	st := scheduler.Step{Turn: turn, Step: step, Agent: r.cfg.SessionID, Scope: r.cfg.Scope, Log: em,
		Park: r.cfg.Park != nil}
	sctx, cancelStep := context.WithCancelCause(ctx)
	defer cancelStep(nil)
	stop := em.startFlusher(sctx, cancelStep)
	defer stop() // also when RunStep panics: the flusher must not outlive the step
	out, err := r.cfg.Scheduler.RunStep(sctx, st, calls, em)
	stop()
	if em.logErr != nil {
		// What the failed batch held, and what was staged after it, is never committed: the
		// tool was told its commit failed (review 18 P2-a).
		r.w.discard()
		return out, r.logErr(em.logErr)
	}
	if err != nil {
		return out, fmt.Errorf("tool scheduler: %w", err)
	}
	return out, nil
}

// stepEmitter implements scheduler.Emitter over the runner's writer, and registry.Recorder for
// the bodies of the step's calls. The "seq" it returns from ToolCall is a token naming the staged
// event; the event's real seq is assigned when its batch is committed, and the `tool/result`
// citing it is resolved then.
//
// While the step runs, the runner's writer and mirror are used from the scheduler (on the
// runner's goroutine) and from tool bodies committing events (on theirs): mu serializes every
// such use. Nothing else touches them until RunStep has returned, when every body has settled.
type stepEmitter struct {
	mu         sync.Mutex
	r          *Runner
	turn, step int
	calls      []*handle
	started    []time.Time // by call token: when its tool/call was staged (metrics)
	logErr     error
	staged     map[string]bool // ids of contexts staged in this step
}

// Commit implements registry.Recorder: the events are staged after everything staged so far and
// the writer's pending batch is committed at once.
func (e *stepEmitter) Commit(ctx context.Context, evs ...eventlog.NewEvent) ([]eventlog.Event, error) {
	for _, ne := range evs {
		if err := toolMayWrite(ne); err != nil {
			return nil, err
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.logErr != nil {
		return nil, e.logErr
	}
	hs := make([]*handle, len(evs))
	for i, ne := range evs {
		hs[i] = e.r.w.stage(staged{typ: ne.Type, data: ne.Data, ignorable: ne.Ignorable})
	}
	if err := e.flushLocked(ctx); err != nil {
		return nil, err
	}
	out := make([]eventlog.Event, len(hs))
	for i, h := range hs {
		ev, ok := e.r.m.log.At(h.seq)
		if !ok {
			return nil, fmt.Errorf("agentloop: committed event %d is not in the runner's view", h.seq)
		}
		out[i] = ev
	}
	return out, nil
}

// CommitFunc implements registry.Recorder: build runs inside the append, on the runner's view of
// the log brought up to date, after everything staged so far.
func (e *stepEmitter) CommitFunc(ctx context.Context, build func(turn []eventlog.Event) ([]eventlog.NewEvent, error)) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.logErr != nil {
		return e.logErr
	}
	e.r.w.stage(staged{fresh: true, expand: func(*eventlog.Head) ([]eventlog.NewEvent, error) {
		evs, err := build(e.r.m.log.From(e.r.m.turnSeq))
		if err != nil {
			return nil, err
		}
		for _, ne := range evs {
			if err := toolMayWrite(ne); err != nil {
				return nil, err
			}
		}
		return evs, nil
	}})
	return e.flushLocked(ctx)
}

// ToolCall implements scheduler.Emitter.
func (e *stepEmitter) ToolCall(_ context.Context, c scheduler.Call) (int64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c.Started() {
		// A resumed call: its tool/call is in the log, and its result cites that one.
		e.calls = append(e.calls, &handle{seq: c.Resume.CallSeq, idx: -1})
		if e.r.cfg.Metrics != nil {
			e.started = append(e.started, time.Now())
		}
		return int64(len(e.calls) - 1), nil
	}
	h := e.r.w.stage(staged{typ: eventlog.TypeToolCall, size: 64 + len(c.Arguments),
		data: eventlog.ToolCall{Turn: e.turn, Step: e.step, CallID: c.ID, Name: c.Name, Arguments: c.Arguments}})
	e.calls = append(e.calls, h)
	if e.r.cfg.Metrics != nil {
		e.started = append(e.started, time.Now())
	}
	return int64(len(e.calls) - 1), nil
}

// ToolResult implements scheduler.Emitter.
func (e *stepEmitter) ToolResult(_ context.Context, c scheduler.Call, token int64, res *registry.Result) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if token < 0 || token >= int64(len(e.calls)) {
		return fmt.Errorf("agentloop: tool/result for %s cites unknown call token %d", c.ID, token)
	}
	if e.r.cfg.Metrics != nil && int(token) < len(e.started) {
		code := ""
		if res.IsError {
			code = toolErrorCode(res)
		}
		// A name the model made up (UNKNOWN_TOOL) is recorded as "unknown" (telemetry.ToolName).
		e.r.cfg.Metrics.ToolCall(c.Name, code, time.Since(e.started[token]))
	}
	msg := llm.NewToolResultMessage(e.r.newID(), c.ID, res.Content, res.IsError)
	d := eventlog.ToolResult{Turn: e.turn, Step: e.step, Message: msg, Error: res.ErrorInfo(),
		Meta: res.Meta, Mutations: res.Mutations}
	e.r.w.stage(staged{typ: eventlog.TypeToolResult, data: d, surface: true,
		cites: []*handle{e.calls[token]}, size: 128 + contentSize(res.Content)})
	return nil
}

// Contexts implements scheduler.Emitter: the contexts go to the end of the next-step inbox. A
// context whose id is already in the inbox (or staged for it) gets a fresh id: message ids must be
// unique across the inbox (LOOP-1), and tools choose theirs.
func (e *stepEmitter) Contexts(_ context.Context, _ scheduler.Call, msgs []llm.Message) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]llm.Message, len(msgs))
	for i, m := range msgs {
		if e.r.m.inbox.Has(m.ID) || e.staged[m.ID] {
			m.ID = e.r.newID()
		}
		if e.staged == nil {
			e.staged = map[string]bool{}
		}
		e.staged[m.ID] = true
		out[i] = m
	}
	e.r.w.stageInsertion(eventlog.InboxNextStep, out)
	return nil
}

// StepEnd implements scheduler.StepEnder: the results of exclusive calls (which may have changed
// something outside) are made durable at once; results of parallel, concurrency-safe calls are
// written at most a chunk window after they settled (the step's flusher while other calls run,
// else the runner's next batch: the next step's claim, the model call's timer or the turn's end),
// which saves a transaction per tool step.
//
// Results that handed contexts to the next-step inbox are flushed too: the next step claims from
// the committed inbox, and must find them (LOOP-6).
func (e *stepEmitter) StepEnd(ctx context.Context, out scheduler.Outcome) error {
	for _, cr := range out.Results {
		if cr.Call.Mode == registry.Exclusive && !cr.Synthetic || len(cr.Result.AdditionalContexts) > 0 {
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.flushLocked(ctx)
		}
	}
	return nil
}

// Launch implements scheduler.Launcher: a launch of concurrency-safe calls is committed by the
// step's flusher once its oldest pending event is a chunk window old (docs/rules.md, log-window),
// so that results settling inside the window share the commit; one with an exclusive call is made
// durable first, so that crash repair tells a started exclusive call (TOOL_OUTCOME_UNKNOWN) from
// one that never started.
func (e *stepEmitter) Launch(ctx context.Context, calls []scheduler.Call) error {
	for _, c := range calls {
		if c.Mode != registry.Parallel {
			return e.Flush(ctx)
		}
	}
	return nil
}

// Flush implements scheduler.Emitter.
func (e *stepEmitter) Flush(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.flushLocked(ctx)
}

func (e *stepEmitter) flushLocked(ctx context.Context) error {
	if e.logErr != nil {
		// A failed batch is not committed by a later flush (review 18 P2-a): the step stops
		// with the first error.
		return e.logErr
	}
	if err := e.r.w.flush(ctx); err != nil {
		e.logErr = err
		return err
	}
	return nil
}

// toolErrorCode is the code of a failure result: its info's code, or TOOL_ERROR when it has none.
func toolErrorCode(res *registry.Result) string {
	if info := res.ErrorInfo(); info != nil && info.Code != "" {
		return info.Code
	}
	return "TOOL_ERROR"
}

func contentSize(blocks []llm.Block) int {
	n := 0
	for _, b := range blocks {
		n += len(b.Text) + len(b.Data)
	}
	return n
}

// toolMayWrite checks an event a call writes while it runs: not a surface event, no citations,
// and a type the vocabulary knows unless it is ignorable.
func toolMayWrite(ne eventlog.NewEvent) error {
	typ := ne.Type
	if p, ok := ne.Data.(eventlog.Payload); ok && typ == "" {
		typ = p.Type()
	}
	if eventlog.IsSurfaceType(typ) || ne.SurfaceOp != nil || ne.SourceEventSeqs != nil {
		return fmt.Errorf("agentloop: a tool may not write %q events or cite events", typ)
	}
	if !eventlog.KnownType(typ) && !ne.Ignorable {
		return fmt.Errorf("agentloop: a tool may write an unknown event type (%q) only as ignorable", typ)
	}
	return nil
}
