package codemode_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/dshd/dshd/pkg/codemode"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/tools/demo"
)

// fixture is a real registry with the demo tools (echo, parallel-safe; sleep, exclusive),
// run_code installed from a Runtime, a scope "agent" in the given mode, and a real in-memory
// journal behind a recorder.
type fixture struct {
	t   testing.TB
	k   *kernel.Kernel
	reg *registry.Registry
	rt  *codemode.Runtime
	j   *eventlog.MemJournal
	rec *journalRecorder
	f   *kernel.Fiber // the agent scope's fiber
}

const agentScope = "agent"

func newFixture(t testing.TB, mode registry.PresentMode, cfg codemode.Config, extra ...*registry.Tool) *fixture {
	t.Helper()
	return newFixtureCap(t, mode, cfg, nil, extra...)
}

// newFixtureCap is newFixture with the agents' sub-call caps.
func newFixtureCap(t testing.TB, mode registry.PresentMode, cfg codemode.Config, subCalls codemode.SubCallsFunc, extra ...*registry.Tool) *fixture {
	t.Helper()
	k := kernel.New(nil)
	reg, err := registry.New(registry.Config{Scopes: k.Scopes()})
	if err != nil {
		t.Fatal(err)
	}
	all, err := demo.Tools()
	if err != nil {
		t.Fatal(err)
	}
	var tools []*registry.Tool // echo (parallel-safe) and sleep (exclusive): the programs' tools
	for _, tl := range all {
		if tl.Name == "echo" || tl.Name == "sleep" {
			tools = append(tools, tl)
		}
	}
	g := k.Fiber("tools", nil)
	for _, tl := range append(tools, extra...) {
		if _, err := reg.Register(g, tl); err != nil {
			t.Fatal(err)
		}
	}
	rt, err := codemode.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Install(g, reg, subCalls, nil); err != nil {
		t.Fatal(err)
	}
	s, err := k.Scopes().Declare(agentScope, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := k.Fiber(agentScope, s)
	if mode != registry.ModeNative {
		if _, err := reg.PresentAs(f, mode); err != nil {
			t.Fatal(err)
		}
	}
	j := eventlog.NewMemJournal(nil)
	return &fixture{t: t, k: k, reg: reg, rt: rt, j: j, rec: &journalRecorder{j: j}, f: f}
}

// journalRecorder is registry.Recorder over a MemJournal: each Commit is one append.
type journalRecorder struct {
	j       *eventlog.MemJournal
	mu      sync.Mutex
	commits int
}

func (r *journalRecorder) Commit(ctx context.Context, evs ...eventlog.NewEvent) ([]eventlog.Event, error) {
	r.mu.Lock()
	r.commits++
	r.mu.Unlock()
	return r.j.Append(ctx, func(eventlog.Head) ([]eventlog.NewEvent, error) { return evs, nil })
}

// CommitFunc implements registry.Recorder over the whole journal (the tests have one turn).
func (r *journalRecorder) CommitFunc(ctx context.Context, build func([]eventlog.Event) ([]eventlog.NewEvent, error)) error {
	_, err := r.j.Append(ctx, func(eventlog.Head) ([]eventlog.NewEvent, error) { return build(r.j.Events()) })
	return err
}

// input is a top-level run_code call of the agent, in a session.
func (fx *fixture) input(callID, code string) registry.Input {
	args, _ := json.Marshal(map[string]string{"code": code, "description": "Test program"})
	return registry.Input{CallID: callID, Name: registry.RunCodeName, Args: args, Scope: agentScope,
		Agent: "s1", Location: registry.Location{Turn: 1, Step: 1}, Log: fx.rec}
}

func (fx *fixture) run(ctx context.Context, code string) *registry.Result {
	fx.t.Helper()
	return fx.reg.Execute(ctx, fx.input("c1", code))
}

func text(blocks []llm.Block) string {
	var parts []string
	for _, b := range blocks {
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "")
}

// dispatches returns the code-dispatch events of the journal as "<type> <subCallId>".
func (fx *fixture) dispatches() []string {
	var out []string
	for _, ev := range fx.j.Events() {
		switch ev.Type {
		case eventlog.TypeToolCodeDispatchInit:
			p, err := eventlog.Decode[eventlog.CodeDispatchStart](ev)
			if err != nil {
				fx.t.Fatal(err)
			}
			out = append(out, "start "+p.SubCallID)
		case eventlog.TypeToolCodeDispatch:
			p, err := eventlog.Decode[eventlog.CodeDispatch](ev)
			if err != nil {
				fx.t.Fatal(err)
			}
			out = append(out, "done "+p.SubCallID)
		}
	}
	return out
}

func mustValue(t *testing.T, res *registry.Result) codemode.Value {
	t.Helper()
	if res.IsError {
		t.Fatalf("run_code failed: %s", text(res.Content))
	}
	var v codemode.Value
	if err := json.Unmarshal(res.Value, &v); err != nil {
		t.Fatal(err)
	}
	return v
}
