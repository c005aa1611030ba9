package registry

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
)

var benchContent = []llm.Block{llm.TextBlock("ok")}

// trivialTool is a raw tool whose body returns a constant and whose render is constant.
func trivialTool() *Tool {
	return &Tool{
		Name:       "noop",
		Parameters: json.RawMessage(`{"type":"object"}`),
		Output:     &Output{Render: func(_, _ json.RawMessage) ([]llm.Block, error) { return benchContent, nil }},
		Execute: func(context.Context, *Execution) (json.RawMessage, error) {
			return json.RawMessage(`"ok"`), nil
		},
	}
}

func benchEnv(b *testing.B, tool *Tool) *env {
	e := newEnv(b, Config{})
	if _, err := e.r.Register(e.g, tool); err != nil {
		b.Fatal(err)
	}
	return e
}

func runBench(b *testing.B, e *env, name, args string) {
	in := Input{CallID: "c1", Name: name, Args: json.RawMessage(args)}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if r := e.r.Execute(ctx, in); r.IsError {
			b.Fatal(r.Error.Message)
		}
	}
}

func addHooks(e *env) {
	for range 3 {
		kernel.Listen(e.g, e.r.Hooks.PreExecute, func(ctx context.Context, _ *Execution, next func(context.Context) (Decision, error)) (Decision, error) {
			return next(ctx)
		})
	}
	e.r.Guard(e.g, func(*Execution) string { return "" })
	kernel.Listen(e.g, e.r.Hooks.PostExecute, func(ctx context.Context, _ *Call, next func(context.Context) (PostDecision, error)) (PostDecision, error) {
		return next(ctx)
	})
}

func BenchmarkExecutePlain(b *testing.B) {
	runBench(b, benchEnv(b, trivialTool()), "noop", `{"text":"hi"}`)
}

func BenchmarkExecuteHooks(b *testing.B) {
	e := benchEnv(b, trivialTool())
	addHooks(e)
	runBench(b, e, "noop", `{"text":"hi"}`)
}

func BenchmarkExecuteDefinePlain(b *testing.B) {
	runBench(b, benchEnv(b, echoTool(b, nil)), "echo", `{"text":"hi"}`)
}

func BenchmarkExecuteDefineHooks(b *testing.B) {
	e := benchEnv(b, echoTool(b, nil))
	addHooks(e)
	runBench(b, e, "echo", `{"text":"hi"}`)
}
