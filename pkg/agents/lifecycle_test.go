package agents_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/llm/openai"
)

func newAgentsWith(t testing.TB, edit func(*agents.Config)) *agents.Agents {
	t.Helper()
	tools, err := agents.BuiltinTools(true)
	if err != nil {
		t.Fatal(err)
	}
	cfg := agents.Config{Tools: tools, Loop: agentloop.Config{RetryBackoff: time.Millisecond}}
	edit(&cfg)
	a, err := agents.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func toolNames(t *testing.T, a *agents.Agents, scope string) []string {
	t.Helper()
	s, err := a.Registry().Schemas(scope)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sc := range s {
		names = append(names, sc.Name)
	}
	slices.Sort(names)
	return names
}

const restricted = `{"name":"a","model":{"provider":"scripted","model":"m"},"tools":{"allow":["echo"]},
	"approval":{"ask":["echo"]},"prompt":{"persona":"Persona of {{team}}.","sections":[{"name":"rules","order":1,"text":"Rule."}],
	"variables":{"team":"core"}}}`

// TestIdleScopeIsDisposedAndSetUpAgain: a preset version evicted from the idle LRU has its
// registrations undone (restriction, guard, prompt sections and variables) without touching the
// global view, and is set up again on its next Agent call.
func TestIdleScopeIsDisposedAndSetUpAgain(t *testing.T) {
	t.Parallel()
	a := newAgentsWith(t, func(c *agents.Config) { c.MaxIdleScopes = 1 })
	all := toolNames(t, a, "")
	guards := a.Registry().Hooks.PreExecute.Len()
	pa := presetOf(t, restricted)
	cfg, release, err := agentOf(a, pa)
	if err != nil {
		t.Fatal(err)
	}
	key := cfg.Scope
	if got := toolNames(t, a, key); !slices.Equal(got, []string{"echo"}) {
		t.Fatalf("restricted view %v", got)
	}
	if n := a.Registry().Hooks.PreExecute.Len(); n != guards+1 {
		t.Fatalf("%d pre-execute listeners, want %d", n, guards+1)
	}
	release()
	release() // a second call does nothing
	if live, idle := a.ScopeCounts(); live != 1 || idle != 1 {
		t.Fatalf("live %d idle %d, want 1 1", live, idle)
	}
	// Another version pushes the first out of the LRU of one.
	_, rb, err := agentOf(a, presetOf(t, `{"name":"b","model":{"provider":"scripted","model":"m"}}`))
	if err != nil {
		t.Fatal(err)
	}
	rb()
	if live, idle := a.ScopeCounts(); live != 1 || idle != 1 {
		t.Fatalf("live %d idle %d, want 1 1", live, idle)
	}
	if got := toolNames(t, a, key); !slices.Equal(got, all) {
		t.Fatalf("the disposed scope still sees %v, want every tool %v", got, all)
	}
	if got := toolNames(t, a, ""); !slices.Equal(got, all) {
		t.Fatalf("the global view changed: %v", got)
	}
	if n := a.Registry().Hooks.PreExecute.Len(); n != guards {
		t.Fatalf("%d pre-execute listeners after disposal, want %d", n, guards)
	}
	// Set up again: the same registrations succeed (none were left behind to collide with).
	res, err := a.Prompt(context.Background(), agents.Session{ID: uuid.New(), Preset: pa})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.System, "Persona of core.\n\nRule.") || len(res.Tools) != 1 || res.Tools[0].Name != "echo" {
		t.Fatalf("rebuilt prompt %q tools %v", res.System, res.Tools)
	}
	evs := run(t, a, pa, `tool:sleep args:{"ms":1}`)
	if out := find(evs, eventlog.TypeToolResult); len(out) != 1 || !strings.Contains(out[0], `unknown tool \"sleep\"`) {
		t.Fatalf("results %v", out)
	}
	if out := find(run(t, a, pa, "tools:1"), eventlog.TypeToolResult); len(out) != 1 || !strings.Contains(out[0], "requires approval") {
		t.Fatalf("the guard was not set up again: %v", out)
	}
}

// TestScopeInUseIsNotDisposed: however many other versions come and go, a scope with a holder
// keeps its registrations; once released it is an idle scope like any other.
func TestScopeInUseIsNotDisposed(t *testing.T) {
	t.Parallel()
	a := newAgentsWith(t, func(c *agents.Config) { c.MaxIdleScopes = 1 })
	pa := presetOf(t, restricted)
	cfg, release, err := agentOf(a, pa)
	if err != nil {
		t.Fatal(err)
	}
	// A second session of the same version shares the scope.
	cfg2, release2, err := agentOf(a, pa)
	if err != nil || cfg2.Scope != cfg.Scope {
		t.Fatalf("%v, scope %q vs %q", err, cfg2.Scope, cfg.Scope)
	}
	release2()
	for i := range 5 {
		_, r, err := agentOf(a, presetOf(t, fmt.Sprintf(`{"name":"p%d","model":{"provider":"scripted","model":"m"}}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		r()
	}
	if live, idle := a.ScopeCounts(); live != 2 || idle != 1 {
		t.Fatalf("live %d idle %d, want 2 1", live, idle)
	}
	if got := toolNames(t, a, cfg.Scope); !slices.Equal(got, []string{"echo"}) {
		t.Fatalf("the scope in use lost its restriction: %v", got)
	}
	// The held configuration still runs with its restriction.
	j := eventlog.NewMemJournal(nil)
	if _, err := j.Append(context.Background(), func(h eventlog.Head) ([]eventlog.NewEvent, error) {
		return []eventlog.NewEvent{{Type: eventlog.TypeInboxSpliced,
			Data: eventlog.Insertion(eventlog.InboxNextTurn, 0, llm.NewUserMessage("u1", `tool:sleep args:{"ms":1}`))}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := agentloop.NewRunner(cfg, j).Serve(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out := find(j.Events(), eventlog.TypeToolResult); len(out) != 1 || !strings.Contains(out[0], `unknown tool \"sleep\"`) {
		t.Fatalf("results %v", out)
	}
	release()
	if live, idle := a.ScopeCounts(); live != 1 || idle != 1 {
		t.Fatalf("after release: live %d idle %d, want 1 1", live, idle)
	}
	if got := toolNames(t, a, cfg.Scope); !slices.Equal(got, []string{"echo"}) {
		t.Fatalf("the most recently released scope was disposed: %v", got)
	}
}

// TestPromptHoldsTheScopeOnlyForTheAssembly: with no idle scopes kept, a Prompt call leaves
// nothing set up behind it, and a failed setup is undone too.
func TestPromptHoldsTheScopeOnlyForTheAssembly(t *testing.T) {
	t.Parallel()
	a := newAgentsWith(t, func(c *agents.Config) { c.MaxIdleScopes = -1 })
	for range 2 {
		if _, err := a.Prompt(context.Background(), agents.Session{ID: uuid.New(), Preset: presetOf(t, restricted)}); err != nil {
			t.Fatal(err)
		}
		if live, idle := a.ScopeCounts(); live != 0 || idle != 0 {
			t.Fatalf("live %d idle %d, want none", live, idle)
		}
	}
	bad := presetOf(t, `{"name":"p","model":{"provider":"scripted","model":"m"},"prompt":{"persona":"x"},"tools":{"allow":["ghost"]}}`)
	for range 2 { // the second setup fails the same way, not on leftovers of the first
		_, err := a.Prompt(context.Background(), agents.Session{ID: uuid.New(), Preset: bad})
		if err == nil || !strings.Contains(err.Error(), "ghost") {
			t.Fatalf("err %v", err)
		}
	}
}

// TestClientsAreCachedByBaseURL: one client per endpoint whatever the model (the model goes with
// each request), and a bounded number of them.
func TestClientsAreCachedByBaseURL(t *testing.T) {
	t.Parallel()
	var built atomic.Int32
	a := newAgentsWith(t, func(c *agents.Config) {
		c.ModelHosts = []string{"*"}
		c.OpenAIFunc = func(c openai.Config) llm.Provider {
			built.Add(1)
			if c.Model != "" {
				t.Errorf("client built for model %q", c.Model)
			}
			return openai.New(c)
		}
	})
	for _, m := range []string{"m1", "m2", "m3"} {
		_, r, err := agentOf(a, presetOf(t, `{"name":"p","model":{"provider":"openai","model":"`+m+`","baseUrl":"http://one.example/v1"}}`))
		if err != nil {
			t.Fatal(err)
		}
		r()
	}
	if n := built.Load(); n != 1 {
		t.Fatalf("%d clients built for one endpoint", n)
	}
	for i := range 200 {
		_, r, err := agentOf(a, presetOf(t, fmt.Sprintf(`{"name":"p","model":{"provider":"openai","model":"m","baseUrl":"http://h%d.example/v1"}}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		r()
	}
	if n := a.ClientCount(); n > 64 {
		t.Fatalf("%d clients cached", n)
	}
}
