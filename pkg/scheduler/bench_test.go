package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
)

// nopEmitter is the cheapest Emitter: it only counts seqs.
type nopEmitter struct{ seq int64 }

func (e *nopEmitter) ToolCall(context.Context, Call) (int64, error) { e.seq++; return e.seq, nil }
func (e *nopEmitter) ToolResult(context.Context, Call, int64, *registry.Result) error {
	e.seq++
	return nil
}
func (e *nopEmitter) Contexts(context.Context, Call, []llm.Message) error { return nil }
func (e *nopEmitter) Flush(context.Context) error                         { return nil }

// BenchmarkRunStep16Parallel runs a step of 16 parallel calls of a trivial tool through the
// scheduler and the real registry (no hooks, default cap 10).
func BenchmarkRunStep16Parallel(b *testing.B) {
	k := kernel.New(nil)
	reg, err := registry.New(registry.Config{Scopes: k.Scopes()})
	if err != nil {
		b.Fatal(err)
	}
	content := []llm.Block{llm.TextBlock("ok")}
	_, err = reg.Register(k.Fiber("g", nil), &registry.Tool{
		Name:       "noop",
		Parameters: json.RawMessage(`{"type":"object"}`),
		Output:     &registry.Output{Render: func(_, _ json.RawMessage) ([]llm.Block, error) { return content, nil }},
		Execute: func(context.Context, *registry.Execution) (json.RawMessage, error) {
			return json.RawMessage(`"ok"`), nil
		},
		IsConcurrencySafe: func(json.RawMessage) bool { return true },
	})
	if err != nil {
		b.Fatal(err)
	}
	calls := make([]Call, 16)
	for i := range calls {
		calls[i] = Call{ID: fmt.Sprintf("c%d", i), Name: "noop", Arguments: `{"text":"hi"}`}
	}
	s := New(reg, Config{})
	ctx := context.Background()
	step := Step{Turn: 1, Step: 1, Agent: "a"}
	b.ReportAllocs()
	for b.Loop() {
		out, err := s.RunStep(ctx, step, calls, &nopEmitter{})
		if err != nil || len(out.Results) != 16 {
			b.Fatal(err, len(out.Results))
		}
	}
}
