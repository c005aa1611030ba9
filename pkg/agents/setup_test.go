package agents_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/preset"
)

// bigPreset returns a scripted preset with vars prompt variables and sections sections using
// them, without validation (a stored version may predate the limits).
func bigPreset(vars, sections int) preset.Preset {
	b := preset.Body{Name: "big", Model: preset.Model{Provider: preset.ProviderScripted, Model: "m"}}
	b.Prompt.Variables = make(map[string]string, vars)
	for i := range vars {
		b.Prompt.Variables[fmt.Sprintf("v%d", i)] = fmt.Sprintf("value %d", i)
	}
	for i := range sections {
		order := float64(i)
		b.Prompt.Sections = append(b.Prompt.Sections, preset.Section{Name: fmt.Sprintf("s%d", i), Order: &order,
			Text: fmt.Sprintf("{{v%d}}", i%max(vars, 1))})
	}
	b.Normalize()
	return preset.Preset{ID: uuid.New(), Version: 1, Body: b}
}

// allocated returns the bytes f allocates, the least of three runs.
func allocated(f func()) uint64 {
	best := ^uint64(0)
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		best = min(best, after.TotalAlloc-before.TotalAlloc)
	}
	return best
}

// TestFinding1_PresetSetupIsLinear (issue 9, finding 1): setting a preset version's scope up
// and disposing it takes work linear in the number of its prompt variables and sections. It was
// quadratic (each registration copied the scope's lists), so 20k variables took seconds under
// the agents' one lock. Counted in bytes allocated for 1k and 10k, not in wall time.
func TestFinding1_PresetSetupIsLinear(t *testing.T) {
	a := newAgentsWith(t, func(c *agents.Config) { c.MaxIdleScopes = -1 }) // release disposes
	cost := func(n int) uint64 {
		p := bigPreset(n, n)
		return allocated(func() {
			_, release, err := agentOf(a, p)
			if err != nil {
				t.Fatal(err)
			}
			release()
		})
	}
	small, large := cost(1000), cost(10000)
	if ratio := float64(large) / float64(small); ratio > 25 {
		t.Fatalf("setup and disposal of 10k variables and sections allocate %d bytes, of 1k %d: %.0fx for 10x (quadratic)",
			large, small, ratio)
	}
	if live, _ := a.ScopeCounts(); live != 0 {
		t.Fatalf("%d scopes left", live)
	}
}

func BenchmarkPresetSetup(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			a := newAgentsWith(b, func(c *agents.Config) { c.MaxIdleScopes = -1 })
			p := bigPreset(n, n)
			b.ReportAllocs()
			for b.Loop() {
				_, release, err := agentOf(a, p)
				if err != nil {
					b.Fatal(err)
				}
				release()
			}
		})
	}
}

// TestFinding1_SetupDoesNotBlockOtherPresets (issue 9, finding 1): while a large preset's scope
// is being set up (held in the middle of its setup here), the agents of other presets are built
// and their prompts assembled; a second session of the large preset waits for the one setup
// instead of running its own.
func TestFinding1_SetupDoesNotBlockOtherPresets(t *testing.T) {
	t.Parallel()
	a := newAgentsWith(t, func(*agents.Config) {})
	big := bigPreset(preset.MaxVariables, preset.MaxSections) // huge, but valid
	if err := (preset.Rules{}).Validate(&big.Body); err != nil {
		t.Fatal(err)
	}
	bigKey := fmt.Sprintf("preset:%s@%d", big.ID, big.Version)
	entered, hold := make(chan struct{}), make(chan struct{})
	var setups atomic.Int32
	a.SetSetupHook(func(key string) {
		if key == bigKey {
			setups.Add(1)
			close(entered)
			<-hold
		}
	})
	type result struct {
		system string
		err    error
	}
	bigDone := make(chan result, 2)
	for range 2 {
		go func() {
			res, err := a.Prompt(context.Background(), agents.Session{ID: uuid.New(), Preset: big})
			bigDone <- result{res.System, err}
		}()
	}
	<-entered

	other := presetOf(t, `{"name":"o","model":{"provider":"scripted","model":"m"},"prompt":{"persona":"Other."}}`)
	otherDone := make(chan result, 1)
	go func() {
		res, err := a.Prompt(context.Background(), agents.Session{ID: uuid.New(), Preset: other})
		otherDone <- result{res.System, err}
	}()
	select {
	case r := <-otherDone:
		if r.err != nil || !strings.Contains(r.system, "Other.") {
			t.Fatalf("other preset: %q, %v", r.system, r.err)
		}
	case <-time.After(10 * time.Second):
		close(hold)
		t.Fatal("another preset's Agent waited for the large preset's setup")
	}
	select {
	case r := <-bigDone:
		t.Fatalf("a session of the large preset did not wait for its setup: %v", r.err)
	default:
	}
	close(hold)
	for range 2 {
		r := <-bigDone
		if r.err != nil || !strings.Contains(r.system, "value 0") {
			t.Fatalf("large preset: %.40q, %v", r.system, r.err)
		}
	}
	if n := setups.Load(); n != 1 {
		t.Fatalf("the large preset was set up %d times, want 1", n)
	}
}
