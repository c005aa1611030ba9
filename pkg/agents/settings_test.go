package agents_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/registry"
)

// turnEnd returns the reason of the only turn in evs.
func turnEnd(t *testing.T, evs []eventlog.Event) eventlog.TurnReason {
	t.Helper()
	ends := find(evs, eventlog.TypeTurnEnd)
	if len(ends) != 1 {
		t.Fatalf("turn ends %v", ends)
	}
	return dataOf[eventlog.TurnEnd](t, ends[0]).Reason
}

// A preset without limits.maxSteps runs the loop's default limit: one number, preset.DefaultMaxSteps.
func TestPresetMaxStepsDefaultIsTheLoopDefault(t *testing.T) {
	t.Parallel()
	if agentloop.DefaultMaxSteps != preset.DefaultMaxSteps {
		t.Fatalf("loop default %d, preset default %d", agentloop.DefaultMaxSteps, preset.DefaultMaxSteps)
	}
	a := newAgents(t)
	p := presetOf(t, `{"name":"p","model":{"provider":"scripted","model":"m"}}`)
	cfg, release, err := agentOf(a, p)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if cfg.MaxSteps != agentloop.DefaultMaxSteps {
		t.Fatalf("MaxSteps = %d, want the loop's default %d", cfg.MaxSteps, agentloop.DefaultMaxSteps)
	}
	// The limit is the one a turn runs into (the script asks for more steps than that).
	evs := run(t, a, p, "tools:1 steps:100")
	r := turnEnd(t, evs)
	if r.Kind != eventlog.EndError || r.Error == nil || r.Error.Code != agentloop.CodeMaxSteps {
		t.Fatalf("reason %+v", r)
	}
	if n := len(find(evs, eventlog.TypeStepStart)); n != agentloop.DefaultMaxSteps {
		t.Fatalf("%d steps, want %d", n, agentloop.DefaultMaxSteps)
	}
}

// A preset's limits.maxSteps reaches agentloop.Config.MaxSteps and bounds its turns.
func TestPresetMaxStepsReachesTheLoop(t *testing.T) {
	t.Parallel()
	a := newAgents(t)
	p := presetOf(t, `{"name":"p","model":{"provider":"scripted","model":"m"},"limits":{"maxSteps":3}}`)
	cfg, release, err := agentOf(a, p)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if cfg.MaxSteps != 3 {
		t.Fatalf("MaxSteps = %d", cfg.MaxSteps)
	}
	evs := run(t, a, p, "tools:1 steps:5")
	if r := turnEnd(t, evs); r.Error == nil || r.Error.Code != agentloop.CodeMaxSteps ||
		!strings.Contains(r.Error.Message, "maxSteps 3") {
		t.Fatalf("reason %+v", r)
	}
	if n := len(find(evs, eventlog.TypeStepStart)); n != 3 {
		t.Fatalf("%d steps", n)
	}
}

// settingsOf returns the settings of a new session of p while its configuration is held, and
// checks that they are gone after the release.
func settingsOf(t *testing.T, a *agents.Agents, p preset.Preset) agents.Settings {
	t.Helper()
	id := uuid.New()
	_, release, err := a.Agent(agents.Session{ID: id, Preset: p})
	if err != nil {
		t.Fatal(err)
	}
	s, ok := a.Settings(id.String())
	release()
	if !ok {
		t.Fatal("no settings while the agent is held")
	}
	if _, ok := a.Settings(id.String()); ok {
		t.Fatal("settings after the release")
	}
	return s
}

// The preset's approval settings and tools.maxParallelSubCalls reach the agent's Settings, with
// the preset defaults for what it leaves out.
func TestPresetSettingsReachTheAgent(t *testing.T) {
	t.Parallel()
	a := newAgents(t)
	got := settingsOf(t, a, presetOf(t, `{"name":"p","model":{"provider":"scripted","model":"m"},
		"tools":{"maxParallelSubCalls":3},
		"approval":{"policy":"never","timeoutMs":1234,"ask":["sleep","echo","sleep"]}}`))
	want := agents.Settings{MaxParallelSubCalls: 3,
		Approval: agents.Approval{Policy: preset.PolicyNever, Timeout: 1234 * time.Millisecond, Ask: []string{"echo", "sleep"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("settings %+v, want %+v", got, want)
	}
	got = settingsOf(t, a, presetOf(t, `{"name":"q","model":{"provider":"scripted","model":"m"}}`))
	want = agents.Settings{MaxParallelSubCalls: preset.DefaultMaxParallelSubCalls,
		Approval: agents.Approval{Policy: preset.DefaultPolicy,
			Timeout: preset.DefaultApprovalTimeoutMs * time.Millisecond, Ask: []string{}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("default settings %+v, want %+v", got, want)
	}
	if _, ok := a.Settings(uuid.NewString()); ok {
		t.Fatal("settings of an unknown agent")
	}
}

// Two holders of one session's agent: its settings stay until both released.
func TestSettingsHeldUntilLastRelease(t *testing.T) {
	t.Parallel()
	a := newAgents(t)
	p := presetOf(t, `{"name":"p","model":{"provider":"scripted","model":"m"},"tools":{"maxParallelSubCalls":4}}`)
	s := agents.Session{ID: uuid.New(), Preset: p}
	_, r1, err := a.Agent(s)
	if err != nil {
		t.Fatal(err)
	}
	_, r2, err := a.Agent(s)
	if err != nil {
		t.Fatal(err)
	}
	r1()
	r1() // a second call does nothing
	if got, ok := a.Settings(s.ID.String()); !ok || got.MaxParallelSubCalls != 4 {
		t.Fatalf("after one release: %+v %v", got, ok)
	}
	r2()
	if _, ok := a.Settings(s.ID.String()); ok {
		t.Fatal("settings after the last release")
	}
}

// toolResult decodes the only tool/result of evs.
func toolResult(t *testing.T, evs []eventlog.Event) eventlog.ToolResult {
	t.Helper()
	res := find(evs, eventlog.TypeToolResult)
	if len(res) != 1 {
		t.Fatalf("tool results %v", res)
	}
	return dataOf[eventlog.ToolResult](t, res[0])
}

// resultText is the text of a tool result's tool-result block.
func resultText(r eventlog.ToolResult) string {
	var out string
	for _, b := range r.Message.Content {
		out += llm.Message{Content: b.Content}.Text()
	}
	return out
}

// TestAPR4_PolicyNeverRejectsWithoutAnswerer: under approval.policy never, a call of a tool that
// asks resolves `rejected` at once (no answerer, no approval service): the body does not run and
// the result is `Error: the user rejected tool "<n>"` with {ApprovalRejectedError,
// APPROVAL_REJECTED} (E1). Tools that do not ask run.
func TestAPR4_PolicyNeverRejectsWithoutAnswerer(t *testing.T) {
	t.Parallel()
	a := newAgents(t)
	p := presetOf(t, `{"name":"p","model":{"provider":"scripted","model":"m"},
		"approval":{"policy":"never","ask":["sleep"]}}`)
	r := toolResult(t, run(t, a, p, `tool:sleep args:{"ms":1,"text":"ran"}`))
	if r.Error == nil || *r.Error != (fault.Info{Name: registry.NameApprovalRejected, Code: fault.CodeApprovalRejected}) {
		t.Fatalf("result %+v", r)
	}
	if text := resultText(r); text != `Error: the user rejected tool "sleep"` {
		t.Fatalf("content %q", text)
	}
	if r := toolResult(t, run(t, a, p, "tools:1")); r.Error != nil {
		t.Fatalf("echo did not run: %+v", r)
	}
}

// TestAPR1_PolicyAskWithoutApprovalServiceDenies: agents with no approval service mounted deny an
// ask under approval.policy ask (the default), {ToolDeniedError, TOOL_DENIED}; the server always
// mounts one (pkg/approval).
func TestAPR1_PolicyAskWithoutApprovalServiceDenies(t *testing.T) {
	t.Parallel()
	a := newAgents(t)
	p := presetOf(t, `{"name":"p","model":{"provider":"scripted","model":"m"},
		"approval":{"policy":"ask","ask":["sleep"]}}`)
	r := toolResult(t, run(t, a, p, `tool:sleep args:{"ms":1,"text":"ran"}`))
	if r.Error == nil || *r.Error != (fault.Info{Name: registry.NameToolDenied, Code: fault.CodeToolDenied}) ||
		resultText(r) != `Error: tool "sleep" requires approval (not yet supported)` {
		t.Fatalf("result %+v", r)
	}
}

// TestAPR4_PolicyNeverAbortedSignalCancels: APR-4's order: a signal already aborted gives
// `cancelled` before the policy gives `rejected`. Agents whose policy is ask, and unknown agents,
// are passed on (denied as without an approval service).
func TestAPR4_PolicyNeverAbortedSignalCancels(t *testing.T) {
	t.Parallel()
	a := newAgents(t)
	never := agents.Session{ID: uuid.New(), Preset: presetOf(t, `{"name":"p","model":{"provider":"scripted","model":"m"},
		"approval":{"policy":"never","ask":["sleep"]}}`)}
	ask := agents.Session{ID: uuid.New(), Preset: presetOf(t, `{"name":"q","model":{"provider":"scripted","model":"m"}}`)}
	for _, s := range []agents.Session{never, ask} {
		_, release, err := a.Agent(s)
		if err != nil {
			t.Fatal(err)
		}
		defer release()
	}
	req := func(s agents.Session) registry.ApprovalRequest {
		return registry.ApprovalRequest{Agent: s.ID.String(), ToolName: "sleep", CallID: "c"}
	}
	aborted, cancel := context.WithCancel(context.Background())
	cancel()
	if o, err := a.Approve(context.Background(), req(never)); o != registry.OutcomeRejected || err != nil {
		t.Errorf("never: %q %v", o, err)
	}
	if o, err := a.Approve(aborted, req(never)); o != registry.OutcomeCancelled || err != nil {
		t.Errorf("never, aborted: %q %v", o, err)
	}
	if _, err := a.Approve(context.Background(), req(ask)); !errors.Is(err, registry.ErrNoApprovalService) {
		t.Errorf("ask: %v", err)
	}
	if _, err := a.Approve(context.Background(), registry.ApprovalRequest{Agent: "other", ToolName: "sleep"}); !errors.Is(err, registry.ErrNoApprovalService) {
		t.Errorf("unknown agent: %v", err)
	}
}
