package agents_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/preset"
)

// askUserSchema is a declared tool's parameters, written with spacing and key order a
// re-encoding would change, so that a pass-through is seen to be one.
const askUserSchema = `{"type": "object", "required": ["question"],
	"properties": {"question": {"type": "string", "maxLength": 200}, "choices": {"type": "array", "items": {"type": "string"}}}}`

const declaredPreset = `{"name":"p","model":{"provider":"scripted","model":"m"},
	"tools":{"declared":[{"name":"ask_user","description":"Asks the user a question.","parameters":` + askUserSchema + `,
	"executor":"client","timeoutMs":60000},{"name":"pick_file","parameters":{"type":"object"},"executor":"client"}],
	"deny":["pick_file"],"toolOrder":["ask_user","<unlisted-tools>"]},"approval":{"ask":["ask_user"],"timeoutMs":45000}}`

// wireTools returns the wire tools of p's agent, in prompt order.
func wireTools(t *testing.T, a *agents.Agents, p preset.Preset) []llm.ToolSchema {
	t.Helper()
	res, err := a.Prompt(context.Background(), agents.Session{ID: uuid.New(), Preset: p})
	if err != nil {
		t.Fatal(err)
	}
	return res.Tools
}

// TestE6_PresetDeclaredToolIsAssembled: a tool the preset declares (tools.declared, executor
// client) is among the agent's wire tools with its description and its parameters exactly as the
// preset wrote them; toolOrder, tools.deny and approval.ask name declared tools like any tool;
// the declared tools stay in the preset's scope (another preset and the global view lack them).
func TestE6_PresetDeclaredToolIsAssembled(t *testing.T) {
	t.Parallel()
	a := newAgents(t)
	p := presetOf(t, declaredPreset)
	tools := wireTools(t, a, p)
	if len(tools) == 0 || tools[0].Name != "ask_user" {
		t.Fatalf("tools %v: want ask_user first (toolOrder)", tools)
	}
	if string(tools[0].Parameters) != askUserSchema || tools[0].Description != "Asks the user a question." {
		t.Fatalf("ask_user = %s %q; want the preset's schema unchanged", tools[0].Parameters, tools[0].Description)
	}
	for _, tl := range tools {
		if tl.Name == "pick_file" {
			t.Fatal("pick_file is denied but among the wire tools")
		}
	}
	if !slices.ContainsFunc(tools, func(s llm.ToolSchema) bool { return s.Name == "echo" }) {
		t.Fatalf("tools %v lack the built-in echo", tools)
	}
	other := presetOf(t, `{"name":"q","model":{"provider":"scripted","model":"m"}}`)
	if slices.ContainsFunc(wireTools(t, a, other), func(s llm.ToolSchema) bool { return s.Name == "ask_user" }) {
		t.Fatal("another preset sees ask_user")
	}
	if slices.Contains(a.Registry().Names(""), "ask_user") {
		t.Fatal("the global view has ask_user")
	}
}

// TestE6_SessionAgentsPark: every session agent's configuration lets its turns park (E6), and a
// parked ask waits the preset's approval.timeoutMs.
func TestE6_SessionAgentsPark(t *testing.T) {
	t.Parallel()
	a := newAgents(t)
	for body, want := range map[string]time.Duration{
		declaredPreset: 45 * time.Second,
		`{"name":"q","model":{"provider":"scripted","model":"m"}}`: preset.DefaultApprovalTimeoutMs * time.Millisecond,
	} {
		cfg, release, err := agentOf(a, presetOf(t, body))
		if err != nil {
			t.Fatal(err)
		}
		release()
		if cfg.Park == nil || cfg.Park.ApprovalTimeout != want {
			t.Errorf("Park = %+v; want ApprovalTimeout %v", cfg.Park, want)
		}
	}
}

// TestE6_DeclaredToolMayNotShadowABuiltin: the agents' Rules refuse a declared tool with a
// built-in tool's name, and a preset stored with one anyway fails its setup (its turns end with
// the error) instead of shadowing the built-in tool.
func TestE6_DeclaredToolMayNotShadowABuiltin(t *testing.T) {
	t.Parallel()
	a := newAgents(t)
	const body = `{"name":"p","model":{"provider":"scripted","model":"m"},
		"tools":{"declared":[{"name":"echo","parameters":{"type":"object"},"executor":"client"}]}}`
	p := presetOf(t, body)
	var ve *preset.ValidationError
	if err := a.Rules().Validate(&p.Body); !errors.As(err, &ve) || !strings.Contains(err.Error(), `"echo" is the name of a built-in tool`) {
		t.Fatalf("Validate = %v; want the built-in name refused", err)
	}
	_, err := a.Prompt(context.Background(), agents.Session{ID: uuid.New(), Preset: presetOf(t, body)})
	if err == nil || !strings.Contains(err.Error(), `declared tool "echo" has the name of a built-in tool`) {
		t.Fatalf("Prompt = %v; want the setup failure", err)
	}
}

// TestE6_DeclaredToolsFollowTheScopeLifecycle: tools.allow filters declared tools too, and a
// disposed scope's declared tools are unregistered and registered again by the next setup.
func TestE6_DeclaredToolsFollowTheScopeLifecycle(t *testing.T) {
	t.Parallel()
	a := newAgentsWith(t, func(c *agents.Config) { c.MaxIdleScopes = -1 })
	p := presetOf(t, `{"name":"p","model":{"provider":"scripted","model":"m"},"tools":{"allow":["echo","pick_file"],
		"declared":[{"name":"ask_user","parameters":{"type":"object"},"executor":"client"},
		{"name":"pick_file","parameters":{"type":"object"},"executor":"client"}]}}`)
	declaredKey := fmt.Sprintf("preset:%s@%d/declared", p.ID, p.Version)
	for range 2 {
		var names []string
		for _, tl := range wireTools(t, a, p) {
			names = append(names, tl.Name)
		}
		if strings.Join(names, ",") != "echo,pick_file" {
			t.Fatalf("tools %v; want echo and pick_file (tools.allow)", names)
		}
		// Prompt released the scope, and MaxIdleScopes < 0 disposed it.
		if got := toolNames(t, a, declaredKey); slices.Contains(got, "ask_user") || slices.Contains(got, "pick_file") {
			t.Fatalf("after disposal the declared scope still has %v", got)
		}
	}
}

// serveOnce serves the session's log once with a new runner of the session's agent, as a worker
// does for each run (a resumed turn is a new loop instance).
func serveOnce(t *testing.T, a *agents.Agents, s agents.Session, j *eventlog.MemJournal) {
	t.Helper()
	cfg, release, err := a.Agent(s)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := agentloop.NewRunner(cfg, j).Serve(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestE6_ScriptedModelCallsADeclaredTool: the scripted model calls a declared tool by name like
// any tool (tool:NAME args:JSON); the session's turn parks on the call (a client wait naming the
// tool, no result), and once the client's result is in the log the next runner resumes the
// turn: the call's result is the client's content, and the next scripted step sees it.
func TestE6_ScriptedModelCallsADeclaredTool(t *testing.T) {
	t.Parallel()
	a := newAgents(t)
	s := agents.Session{ID: uuid.New(), Preset: presetOf(t, `{"name":"p","model":{"provider":"scripted","model":"m"},
		"tools":{"declared":[{"name":"ask_user","parameters":`+askUserSchema+`,"executor":"client"}]}}`)}
	j := eventlog.NewMemJournal(nil)
	script := llm.NewUserMessage("u1", `tool:ask_user args:{"question":"Ship?"}`)
	if _, err := j.Append(context.Background(), func(eventlog.Head) ([]eventlog.NewEvent, error) {
		return []eventlog.NewEvent{{Type: eventlog.TypeInboxSpliced, Data: eventlog.Insertion(eventlog.InboxNextTurn, 0, script)}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	serveOnce(t, a, s, j)
	park, ok := eventlog.Parked(j.Events())
	if !ok || park.Reason != eventlog.ParkClient || len(park.Waits) != 1 || park.Waits[0].ToolName != "ask_user" {
		t.Fatalf("park %+v (parked %v)", park, ok)
	}
	if msgs := find(j.Events(), eventlog.TypeAssistantMessage); len(msgs) != 1 || !strings.Contains(msgs[0], `Ship?`) {
		t.Fatalf("assistant messages %v", msgs)
	}
	if res := find(j.Events(), eventlog.TypeToolResult); len(res) != 0 {
		t.Fatalf("a parked call has results %v", res)
	}
	result := eventlog.ClientResult{CallID: park.Waits[0].CallID, Content: []llm.Block{llm.TextBlock("yes, ship it")}}
	if _, err := j.Append(context.Background(), func(eventlog.Head) ([]eventlog.NewEvent, error) {
		return []eventlog.NewEvent{eventlog.Of(result)}, nil
	}); err != nil {
		t.Fatal(err)
	}
	serveOnce(t, a, s, j)
	if res := find(j.Events(), eventlog.TypeToolResult); len(res) != 1 || !strings.Contains(res[0], "yes, ship it") {
		t.Fatalf("results %v", res)
	}
	msgs := find(j.Events(), eventlog.TypeAssistantMessage)
	if len(msgs) != 2 || !strings.Contains(msgs[1], "Done after 1 steps and 1 tool results.") {
		t.Fatalf("assistant messages %v", msgs)
	}
	if ends := find(j.Events(), eventlog.TypeTurnEnd); len(ends) != 1 || !strings.Contains(ends[0], `"completed"`) {
		t.Fatalf("turn/end %v", ends)
	}
}
