package agentloop

import (
	"context"
	"testing"

	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
)

// gate is a parallel-safe test tool whose bodies announce their start and wait for release. Each
// call defers one context message named after its text.
type gate struct {
	started chan string
	release chan struct{}
	ran     chan string
}

type gateArgs struct {
	Text string `json:"text" jsonschema:"required"`
}

func newGate(t *testing.T) (*gate, *registry.Tool) {
	t.Helper()
	g := &gate{started: make(chan string, 16), release: make(chan struct{}), ran: make(chan string, 16)}
	tool, err := registry.Define(registry.DefineSpec[gateArgs, string]{
		Name: "gate", Description: "Wait for the test.", ConcurrencySafe: true,
	}, func(ctx context.Context, exec *registry.Execution, a gateArgs) (string, error) {
		g.ran <- a.Text
		g.started <- a.Text
		m := llm.NewUserMessage("ctx-"+exec.CallID, "context from "+a.Text)
		m.Source = llm.Source{Kind: llm.SourcePlugin, Plugin: "gate"}
		exec.DeferContext(m)
		select {
		case <-g.release:
		case <-ctx.Done():
		}
		return a.Text, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return g, tool
}
