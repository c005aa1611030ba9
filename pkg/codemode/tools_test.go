package codemode_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
)

// gate is a parallel-safe tool whose calls block until released, counting how many run at once.
type gate struct {
	mu      sync.Mutex
	running int
	max     int
	started chan string
	release chan struct{}
	aborted atomic.Int32
}

type gateArgs struct {
	Text string `json:"text" jsonschema:"required"`
}

func newGate() *gate {
	return &gate{started: make(chan string, 100), release: make(chan struct{})}
}

func (g *gate) tool(t testing.TB, name string, parallel bool) *registry.Tool {
	t.Helper()
	tl, err := registry.Define(registry.DefineSpec[gateArgs, string]{Name: name, Description: "Wait for the test to release the call.",
		ConcurrencySafe: parallel}, func(ctx context.Context, _ *registry.Execution, a gateArgs) (string, error) {
		g.mu.Lock()
		g.running++
		if g.running > g.max {
			g.max = g.running
		}
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			g.running--
			g.mu.Unlock()
		}()
		g.started <- a.Text
		select {
		case <-g.release:
			return a.Text, nil
		case <-ctx.Done():
			g.aborted.Add(1)
			return "", context.Cause(ctx)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// wantNoStart fails the test when another gated call starts within a short while: the calls
// started so far are all the scheduler may run now (what follows the name says why).
func (g *gate) wantNoStart(t testing.TB, why string) {
	t.Helper()
	select {
	case s := <-g.started:
		t.Fatalf("%s started %s", s, why)
	case <-time.After(20 * time.Millisecond):
	}
}

func (g *gate) maxRunning() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.max
}

// probe records the executions it sees, defers a context and may conclude the turn or return
// an image.
type probe struct {
	mu    sync.Mutex
	execs []probeSeen
}

type probeSeen struct {
	CallID, RootCallID, Agent string
	HasParent                 bool
	ParentIsOuter             bool
	Location                  registry.Location
}

type probeArgs struct {
	Context  string `json:"context,omitempty"`
	Conclude bool   `json:"conclude,omitempty"`
	Image    bool   `json:"image,omitempty"`
}

type probeOut struct {
	CallID string `json:"callId"`
}

func (p *probe) tool(t *testing.T, outer *atomic.Pointer[registry.Token]) *registry.Tool {
	t.Helper()
	tl, err := registry.Define(registry.DefineSpec[probeArgs, probeOut]{Name: "probe", Description: "Record the call.",
		Render: func(a probeArgs, o probeOut) ([]llm.Block, error) {
			if a.Image {
				return []llm.Block{llm.TextBlock("picture"), {Type: llm.BlockImage, MediaType: "image/png", Data: "iVBORw0KGgo="}}, nil
			}
			return []llm.Block{llm.TextBlock(o.CallID)}, nil
		},
		PresentationMeta: func(probeArgs, probeOut) (any, error) { return map[string]string{"label": "probe"}, nil },
	}, func(_ context.Context, e *registry.Execution, a probeArgs) (probeOut, error) {
		s := probeSeen{CallID: e.CallID, RootCallID: e.RootCallID, Agent: e.Agent, HasParent: e.Parent != nil, Location: e.Location}
		if outer != nil {
			s.ParentIsOuter = e.Parent == outer.Load()
		}
		p.mu.Lock()
		p.execs = append(p.execs, s)
		p.mu.Unlock()
		if a.Context != "" {
			e.DeferContext(llm.NewUserMessage("ctx-"+a.Context, a.Context))
		}
		if a.Conclude {
			e.ConcludeTurn()
		}
		return probeOut{CallID: e.CallID}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

func (p *probe) seen() []probeSeen {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]probeSeen(nil), p.execs...)
}

// rawTool is a raw-registered tool with the given output schema, for the SDK tests.
func rawTool(name, desc, params, output string) *registry.Tool {
	t := &registry.Tool{Name: name, Description: desc,
		Output: &registry.Output{Render: func(_, v json.RawMessage) ([]llm.Block, error) {
			return []llm.Block{llm.TextBlock(string(v))}, nil
		}},
		Execute: func(context.Context, *registry.Execution) (json.RawMessage, error) {
			return json.RawMessage(`null`), nil
		},
	}
	if params != "" {
		t.Parameters = json.RawMessage(params)
	}
	if output != "" {
		t.Output.Schema = json.RawMessage(output)
	}
	return t
}
