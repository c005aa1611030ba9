package main

import (
	"context"
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
)

// inProcess runs the baseline: the same agents, tools and preset as the server, the plain agent
// loop over an in-memory journal (a fresh one per turn, as BenchmarkTurnSteps20MockHTTP does),
// against the same mock model over HTTP. conns goroutines run turns until d has passed.
func inProcess(ctx context.Context, mockURL, script string, conns int, d time.Duration) (Phase, error) {
	u, err := url.Parse(mockURL)
	if err != nil {
		return Phase{}, err
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	tools, err := agents.BuiltinTools(true)
	if err != nil {
		return Phase{}, err
	}
	ag, err := agents.New(agents.Config{Tools: tools, ModelHosts: []string{u.Host}, Logger: logger,
		Loop: agentloop.Config{Logger: logger}})
	if err != nil {
		return Phase{}, err
	}
	p := preset.Preset{ID: uuid.New(), Version: 1, Body: preset.Body{Name: "load",
		Model: preset.Model{Provider: preset.ProviderOpenAI, Model: "mock", BaseURL: mockURL}}}
	p.Body.Normalize()
	cfg, release, err := ag.Agent(agents.Session{ID: uuid.New(), Preset: p})
	if err != nil {
		return Phase{}, err
	}
	defer release()
	turn := func() (events, steps int, err error) {
		j := eventlog.NewMemJournal(nil)
		msg := llm.NewUserMessage(uuid.NewString(), script)
		if _, err := j.Append(ctx, func(h eventlog.Head) ([]eventlog.NewEvent, error) {
			return []eventlog.NewEvent{{Type: eventlog.TypeInboxSpliced,
				Data: eventlog.Insertion(eventlog.InboxNextTurn, h.Inbox.NextTurn, msg)}}, nil
		}); err != nil {
			return 0, 0, err
		}
		reasons, err := agentloop.NewRunner(cfg, j).Serve(ctx)
		if err != nil {
			return 0, 0, err
		}
		if len(reasons) != 1 || reasons[0].Kind != eventlog.EndCompleted {
			return 0, 0, fmt.Errorf("in-process turn ended %+v", reasons)
		}
		evs := j.Events()
		return len(evs), countType(evs, eventlog.TypeAssistantMessage), nil
	}
	// Warm up: connections to the mock, the preset's scope, the allocator.
	for range 3 {
		if _, _, err := turn(); err != nil {
			return Phase{}, err
		}
	}
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
				events, steps, err := turn()
				if err != nil {
					rec.fail(err)
					return
				}
				rec.add(i, time.Since(t0), events, steps)
			}
		}()
	}
	wg.Wait()
	return rec.phase(time.Since(start))
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
