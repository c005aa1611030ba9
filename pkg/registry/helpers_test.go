package registry

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
)

// env is a kernel plus a registry for one test.
type env struct {
	t   testing.TB
	k   *kernel.Kernel
	r   *Registry
	g   *kernel.Fiber // global fiber
	ctx context.Context
}

func newEnv(t testing.TB, cfg Config) *env {
	t.Helper()
	k := kernel.New(nil)
	cfg.Scopes = k.Scopes()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, k: k, r: r, g: k.Fiber("global", nil), ctx: context.Background()}
}

// scope declares key under parent ("" = root) and returns a fiber in it.
func (e *env) scope(key, parent string) *kernel.Fiber {
	e.t.Helper()
	var p *kernel.Scope
	if parent != "" {
		p, _ = e.k.Scopes().Lookup(parent)
	}
	s, err := e.k.Scopes().Declare(key, p)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.k.Fiber(key, s)
}

func (e *env) register(f *kernel.Fiber, t *Tool) kernel.Disposer {
	e.t.Helper()
	d, err := e.r.Register(f, t)
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

func (e *env) exec(name, args string) *Result {
	return e.r.Execute(e.ctx, Input{CallID: "c1", Name: name, Args: json.RawMessage(args)})
}

func (e *env) execIn(scope, name, args string) *Result {
	return e.r.Execute(e.ctx, Input{CallID: "c1", Name: name, Args: json.RawMessage(args), Scope: scope, Agent: scope})
}

func textRender(_, v json.RawMessage) ([]llm.Block, error) {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return []llm.Block{llm.TextBlock(s)}, nil
	}
	return []llm.Block{llm.TextBlock(string(v))}, nil
}

// rawTool returns a raw tool whose body returns value (a JSON literal) and counts runs.
func rawTool(name, value string, runs *int) *Tool {
	return &Tool{
		Name:        name,
		Description: "test tool " + name,
		Parameters:  json.RawMessage(`{"type":"object"}`),
		Output:      &Output{Render: textRender},
		Execute: func(context.Context, *Execution) (json.RawMessage, error) {
			if runs != nil {
				*runs++
			}
			return json.RawMessage(value), nil
		},
	}
}

func contentText(r *Result) string {
	s := ""
	for _, b := range r.Content {
		s += b.Text
	}
	return s
}

func code(r *Result) string {
	if i := r.ErrorInfo(); i != nil {
		return i.Code
	}
	return ""
}
