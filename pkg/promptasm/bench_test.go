package promptasm

import (
	"context"
	"testing"
)

// BenchmarkAssemble measures one typical native assembly: built-ins, a persona with variables,
// tool guidance, four tools, two runtime-context entries, one pass-through listener.
func BenchmarkAssemble(b *testing.B) {
	r := fixtureRegistry(b)
	must(b)(r.OnAssemble(Global, func(ctx context.Context, a Assembly, next Next) (Assembly, error) { return next(ctx, a) }))
	in := fixtureInput(ModeNative)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Assemble(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAssembleCode is the same assembly in code mode, with a trivial SDK renderer.
func BenchmarkAssembleCode(b *testing.B) {
	r := fixtureRegistry(b)
	in := fixtureInput(ModeCode)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Assemble(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
}
