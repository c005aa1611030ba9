package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/scheduler"
)

// baseline runs turns in this process with the same agents, tools and preset as the server,
// against the same mock model over HTTP, in two ways:
//
//   - loop: the plain agent loop (agentloop.Runner) over an in-memory journal, a fresh one per
//     turn, as BenchmarkTurnSteps20MockHTTP does: everything the server's turn does except
//     PostgreSQL, River, HTTP and SSE.
//   - direct: plainer still, no journal and no events at all: the model is called with the
//     history kept in a slice and the tool calls go straight to the scheduler. It shows what the
//     loop's event staging itself costs.
type baseline struct {
	cfg     agentloop.Config
	release func()
}

func newBaseline(mockURL string) (*baseline, error) {
	u, err := url.Parse(mockURL)
	if err != nil {
		return nil, err
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	tools, err := agents.BuiltinTools(true)
	if err != nil {
		return nil, err
	}
	ag, err := agents.New(agents.Config{Tools: tools, ModelHosts: []string{u.Host}, Logger: logger,
		Loop: agentloop.Config{Logger: logger}})
	if err != nil {
		return nil, err
	}
	p := preset.Preset{ID: uuid.New(), Version: 1, Body: preset.Body{Name: "load",
		Model: preset.Model{Provider: preset.ProviderOpenAI, Model: "mock", BaseURL: mockURL}}}
	p.Body.Normalize()
	cfg, release, err := ag.Agent(agents.Session{ID: uuid.New(), Preset: p})
	if err != nil {
		return nil, err
	}
	return &baseline{cfg: cfg, release: release}, nil
}

func (b *baseline) close() { b.release() }

// turnFunc runs one turn and returns the events it logged and its model calls.
type turnFunc func(ctx context.Context, script string) (events, steps int, err error)

// loopTurn runs one turn of the agent loop on a fresh in-memory journal.
func (b *baseline) loopTurn(ctx context.Context, script string) (events, steps int, err error) {
	j := eventlog.NewMemJournal(nil)
	msg := llm.NewUserMessage(uuid.NewString(), script)
	if _, err := j.Append(ctx, func(h eventlog.Head) ([]eventlog.NewEvent, error) {
		return []eventlog.NewEvent{eventlog.Of(eventlog.Insertion(eventlog.InboxNextTurn, h.Inbox.NextTurn, msg))}, nil
	}); err != nil {
		return 0, 0, err
	}
	reasons, err := agentloop.NewRunner(b.cfg, j).Serve(ctx)
	if err != nil {
		return 0, 0, err
	}
	if len(reasons) != 1 || reasons[0].Kind != eventlog.EndCompleted {
		return 0, 0, fmt.Errorf("in-process turn ended %+v", reasons)
	}
	evs := j.Events()
	return len(evs), countType(evs, eventlog.TypeAssistantMessage), nil
}

// directTurn runs one turn without a journal: assemble the prompt, stream the model call, run
// the tool calls through the scheduler, append the results to the history, until the model
// answers without tool calls.
func (b *baseline) directTurn(ctx context.Context, script string) (events, steps int, err error) {
	cfg := b.cfg
	msgs := []llm.Message{llm.NewUserMessage(uuid.NewString(), script)}
	in := cfg.PromptInput
	in.Provider, in.Model = cfg.Model.Provider, cfg.Model.Model
	for step := 1; step <= agentloop.DefaultMaxSteps; step++ {
		asm, err := cfg.Prompt.Assemble(ctx, in)
		if err != nil {
			return 0, steps, err
		}
		s, err := cfg.Provider.Stream(ctx, llm.Request{Config: cfg.Model, System: asm.System,
			Messages: msgs, Tools: asm.Tools, SessionID: cfg.SessionID})
		if err != nil {
			return 0, steps, err
		}
		res, err := llm.ReadAll(s)
		s.Close()
		if err != nil {
			return 0, steps, err
		}
		steps++
		if res.Finish != llm.FinishStop && res.Finish != llm.FinishToolCalls {
			return 0, steps, fmt.Errorf("direct turn: model call finished %q", res.Finish)
		}
		msg := llm.Message{ID: uuid.NewString(), Role: llm.RoleAssistant, Content: res.Blocks,
			Source: llm.Source{Kind: llm.SourceModel, Provider: cfg.Model.Provider, Model: cfg.Model.Model}}
		msgs = append(msgs, msg)
		blocks := msg.ToolCalls()
		if len(blocks) == 0 {
			return 0, steps, nil
		}
		calls := make([]scheduler.Call, len(blocks))
		for i, bl := range blocks {
			calls[i] = scheduler.Call{ID: bl.ID, Name: bl.Name, Arguments: bl.Arguments}
		}
		em := &discardEmitter{}
		out, err := cfg.Scheduler.RunStep(ctx, scheduler.Step{Turn: 1, Step: step, Agent: cfg.SessionID,
			Scope: cfg.Scope}, calls, em)
		if err != nil {
			return 0, steps, fmt.Errorf("tool scheduler: %w", err)
		}
		for _, r := range out.Results {
			if r.Result.IsError {
				return 0, steps, fmt.Errorf("direct turn: tool %s failed: %+v", r.Call.Name, r.Result.ErrorInfo())
			}
			msgs = append(msgs, llm.NewToolResultMessage(uuid.NewString(), r.Call.ID, r.Result.Content, false))
		}
		msgs = append(msgs, em.contexts...)
		if out.ConcludesTurn {
			return 0, steps, nil
		}
	}
	return 0, steps, errors.New("direct turn: step limit reached")
}

// discardEmitter is the scheduler.Emitter of the direct baseline: it records nothing but the
// additional contexts tools hand to the next step.
type discardEmitter struct {
	n        int64
	contexts []llm.Message
}

func (e *discardEmitter) ToolCall(context.Context, scheduler.Call) (int64, error) {
	e.n++
	return e.n - 1, nil
}

func (e *discardEmitter) ToolResult(context.Context, scheduler.Call, int64, *registry.Result) error {
	return nil
}

func (e *discardEmitter) Contexts(_ context.Context, _ scheduler.Call, msgs []llm.Message) error {
	e.contexts = append(e.contexts, msgs...)
	return nil
}

func (e *discardEmitter) Flush(context.Context) error { return nil }

// run runs turn with conns goroutines until d has passed, after a few untimed warm-up turns
// (connections to the mock, the preset's scope, the allocator), and reads the CPU time of this
// process and of the mock model around the measured turns from e.
func (b *baseline) run(ctx context.Context, e *env, turn turnFunc, script string, conns int, d time.Duration) (Phase, error) {
	for range 3 {
		if _, _, err := turn(ctx, script); err != nil {
			return Phase{}, err
		}
	}
	cpu0 := sampleCPU(e)
	rec := newRecorder(conns)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t0 := time.Now()
				events, steps, err := turn(ctx, script)
				if err != nil {
					rec.fail(err)
					return
				}
				rec.add(i, time.Since(t0), events, steps)
			}
		}()
	}
	wg.Wait()
	p, err := rec.phase(time.Since(start))
	cpu1 := sampleCPU(e)
	if p.Turns > 0 {
		p.CPUPerTurn = (cpu1.self - cpu0.self) / time.Duration(p.Turns)
		if e.mockPID > 0 {
			p.MockCPUPerTurn = (cpu1.mock - cpu0.mock) / time.Duration(p.Turns)
		}
		p.CPUIncludesMock = e.mockInProcess
	}
	return p, err
}

func countType(evs []eventlog.Event, typ string) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == typ {
			n++
		}
	}
	return n
}
