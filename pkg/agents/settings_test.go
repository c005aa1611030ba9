package agents_test

import (
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/preset"
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
