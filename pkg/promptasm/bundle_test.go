package promptasm

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

func bundleOf(n int) Bundle {
	var b Bundle
	for i := range n {
		b.Sections = append(b.Sections, Section{Name: fmt.Sprintf("s%d", i), Order: float64(i), Text: "{{v" + fmt.Sprint(i) + "}}"})
		v := fmt.Sprintf("value %d", i)
		b.Variables = append(b.Variables, Variable{Name: fmt.Sprintf("v%d", i),
			Func: func(context.Context, Input) (string, bool) { return v, true }})
	}
	return b
}

func TestRegisterBundle(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{})
	changes := 0
	r.OnChange(func() error { changes++; return nil })
	dispose := must(t)(r.RegisterBundle("p", bundleOf(3)))
	if changes != 1 {
		t.Fatalf("%d change notifications, want 1", changes)
	}
	res := assemble(t, r, Input{Chain: Chain{"p"}})
	if !strings.HasSuffix(res.System, "value 0\n\nvalue 1\n\nvalue 2") {
		t.Fatalf("system %q", res.System)
	}
	// All or none: a name taken in the layer, or twice in the bundle, registers nothing.
	for _, b := range []Bundle{
		{Sections: []Section{{Name: "new", Order: 1}, {Name: "s1", Order: 1}}},
		{Variables: []Variable{{Name: "v2", Func: bundleOf(1).Variables[0].Func}}},
		{Sections: []Section{{Name: "x", Order: 1}, {Name: "x", Order: 2}}},
	} {
		if _, err := r.RegisterBundle("p", b); !errors.Is(err, ErrDuplicate) {
			t.Fatalf("%+v: err %v, want ErrDuplicate", b, err)
		}
	}
	for _, b := range []Bundle{
		{Sections: []Section{{Name: "", Order: 1}}},
		{Variables: []Variable{{Name: "Bad", Func: bundleOf(1).Variables[0].Func}}},
		{Variables: []Variable{{Name: "nil"}}},
	} {
		if _, err := r.RegisterBundle("p", b); err == nil {
			t.Fatalf("%+v registered", b)
		}
	}
	if got := len(r.layers["p"].sections); got != 3 {
		t.Fatalf("%d sections after failed bundles, want 3", got)
	}
	dispose()
	dispose()
	if _, ok := r.layers["p"]; ok {
		t.Fatal("the disposed bundle's layer is left")
	}
	if changes != 2 {
		t.Fatalf("%d change notifications, want 2", changes)
	}
	// A failing change listener rolls the whole bundle back.
	stop := r.OnChange(func() error { return errors.New("no") })
	if _, err := r.RegisterBundle("p", bundleOf(2)); err == nil {
		t.Fatal("registered despite the failing listener")
	}
	stop()
	if _, ok := r.layers["p"]; ok {
		t.Fatal("the rolled-back bundle's layer is left")
	}
	// Entries registered one by one beside a bundle are kept when it is disposed.
	one := must(t)(r.Section("p", Section{Name: "solo", Order: 1, Text: "solo"}))
	must(t)(r.RegisterBundle("p", bundleOf(2)))()
	if res := assemble(t, r, Input{Chain: Chain{"p"}}); !strings.HasSuffix(res.System, "solo") {
		t.Fatalf("system %q", res.System)
	}
	one()
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

// TestFinding1_BundleSetupIsLinear (issue 9, finding 1): registering and disposing a preset's
// prompt takes work linear in its size. Registered one by one, n entries copied the layer's
// lists n times (and disposal scanned them n times): ten times the entries cost a hundred times
// the bytes. Counted in bytes allocated, not wall time.
func TestFinding1_BundleSetupIsLinear(t *testing.T) {
	cost := func(n int) uint64 {
		r := newRegistry(t, Config{})
		b := bundleOf(n)
		return allocated(func() { must(t)(r.RegisterBundle("p", b))() })
	}
	small, large := cost(1000), cost(10000)
	if ratio := float64(large) / float64(small); ratio > 25 {
		t.Fatalf("10k entries allocate %d bytes, 1k %d: %.0fx for 10x the entries (quadratic)", large, small, ratio)
	}
}

func BenchmarkRegisterBundle(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			r := newRegistry(b, Config{})
			bundle := bundleOf(n)
			b.ReportAllocs()
			for b.Loop() {
				must(b)(r.RegisterBundle("p", bundle))()
			}
		})
	}
}
