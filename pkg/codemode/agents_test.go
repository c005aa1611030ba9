package codemode_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/codemode"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/promptasm"
)

// newAgents returns the server's agents with the built-in and demo tools and, when rt is set,
// code mode mounted.
func newAgents(t *testing.T, rt *codemode.Runtime) *agents.Agents {
	t.Helper()
	tools, err := agents.BuiltinTools(true)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agents.New(agents.Config{Tools: tools, CodeRuntime: rt, Loop: agentloop.Config{RetryBackoff: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func newRuntime(t *testing.T, cfg codemode.Config) *codemode.Runtime {
	t.Helper()
	rt, err := codemode.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

func presetOf(t *testing.T, body string) preset.Preset {
	t.Helper()
	var b preset.Body
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		t.Fatal(err)
	}
	b.Normalize()
	return preset.Preset{ID: uuid.New(), Version: 1, Body: b}
}

func presetIn(t *testing.T, mode, extra string) preset.Preset {
	t.Helper()
	return presetOf(t, `{"name":"p","model":{"provider":"scripted","model":"m"},"tools":{"mode":"`+mode+`"`+extra+`}}`)
}

// serve runs one turn of the agent of p for the message text on a MemJournal, with the real
// agent loop and the scripted model, and returns the log.
func serve(t *testing.T, a *agents.Agents, p preset.Preset, text string) []eventlog.Event {
	t.Helper()
	cfg, release, err := a.Agent(agents.Session{ID: uuid.New(), Preset: p})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	j := eventlog.NewMemJournal(nil)
	if _, err := j.Append(context.Background(), func(eventlog.Head) ([]eventlog.NewEvent, error) {
		return []eventlog.NewEvent{{Type: eventlog.TypeInboxSpliced,
			Data: eventlog.Insertion(eventlog.InboxNextTurn, 0, llm.NewUserMessage("u1", text))}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := agentloop.NewRunner(cfg, j).Serve(context.Background()); err != nil {
		t.Fatal(err)
	}
	evs := j.Events()
	if err := eventlog.CheckInvariants(evs); err != nil {
		t.Fatalf("SES-10 invariants: %v", err)
	}
	return evs
}

// runCodeScript is the scripted model's directive to call run_code once with code.
func runCodeScript(code string) string {
	args, _ := json.Marshal(map[string]string{"code": code, "description": "Test program"})
	return "tool:run_code args:" + url.QueryEscape(string(args))
}

func prompt(t *testing.T, a *agents.Agents, p preset.Preset) (promptasm.Result, error) {
	t.Helper()
	return a.Prompt(context.Background(), agents.Session{ID: uuid.New(), Preset: p})
}

func toolNames(ts []llm.ToolSchema) string {
	var s string
	for i, x := range ts {
		if i > 0 {
			s += ","
		}
		s += x.Name
	}
	return s
}

func sectionNames(ss []promptasm.SectionText) string {
	var s string
	for i, x := range ss {
		if i > 0 {
			s += ","
		}
		s += x.Name
	}
	return s
}

func TestPRS6_CodePresetsWaitForARuntime(t *testing.T) {
	t.Parallel()
	without := newAgents(t, nil)
	for _, m := range []string{"code", "both"} {
		_, err := prompt(t, without, presetIn(t, m, ""))
		if !errors.Is(err, promptasm.ErrCodeRuntime) {
			t.Fatalf("%s without a runtime: %v", m, err)
		}
	}
	if _, err := prompt(t, without, presetIn(t, "native", "")); err != nil {
		t.Fatalf("native applies at once: %v", err)
	}
	with := newAgents(t, newRuntime(t, codemode.Config{}))
	for _, m := range []string{"code", "both", "native"} {
		if _, err := prompt(t, with, presetIn(t, m, "")); err != nil {
			t.Fatalf("%s with a runtime: %v", m, err)
		}
	}
}
