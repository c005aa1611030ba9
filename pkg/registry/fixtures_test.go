package registry

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
)

type echoArgs struct {
	Text string `json:"text"`
}

// echoTool is the demo echo: a Define'd, parallel-safe tool returning its text. runs counts
// body runs when non-nil.
func echoTool(t testing.TB, runs *int) *Tool {
	t.Helper()
	tool, err := Define(DefineSpec[echoArgs, string]{Name: "echo", Description: "echo the text", ConcurrencySafe: true},
		func(_ context.Context, _ *Execution, a echoArgs) (string, error) {
			if runs != nil {
				*runs++
			}
			return a.Text, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

// failingTool returns a raw tool whose body fails with err.
func failingTool(name string, err error) *Tool {
	t := rawTool(name, `null`, nil)
	t.Execute = func(context.Context, *Execution) (json.RawMessage, error) { return nil, err }
	return t
}

// counters counts hook invocations.
type counters struct{ pre, around, post, results int }

func (e *env) count(c *counters) {
	f := e.g
	kernel.Listen(f, e.r.Hooks.PreExecute, func(ctx context.Context, x *Execution, next func(context.Context) (Decision, error)) (Decision, error) {
		c.pre++
		return next(ctx)
	})
	kernel.Listen(f, e.r.Hooks.Execute, func(ctx context.Context, x *Execution, next func(context.Context) (*Result, error)) (*Result, error) {
		c.around++
		return next(ctx)
	})
	kernel.Listen(f, e.r.Hooks.PostExecute, func(ctx context.Context, x *Call, next func(context.Context) (PostDecision, error)) (PostDecision, error) {
		c.post++
		return next(ctx)
	})
	kernel.Listen(f, e.r.Hooks.Result, func(context.Context, *Call) error { c.results++; return nil })
}

func (e *env) pre(f *kernel.Fiber, d Decision, opts ...kernel.Option) {
	e.t.Helper()
	_, err := kernel.Listen(f, e.r.Hooks.PreExecute, func(context.Context, *Execution, func(context.Context) (Decision, error)) (Decision, error) {
		return d, nil
	}, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) post(fn func(c *Call) PostDecision) {
	kernel.Listen(e.g, e.r.Hooks.PostExecute, func(_ context.Context, c *Call, _ func(context.Context) (PostDecision, error)) (PostDecision, error) {
		return fn(c), nil
	})
}

func userMsg(id string) llm.Message { return llm.NewUserMessage(id, id) }

func ctxIDs(r *Result) string {
	s := ""
	for i, m := range r.AdditionalContexts {
		if i > 0 {
			s += ","
		}
		s += m.ID
	}
	return s
}

var errExploded = errors.New("exploded")
