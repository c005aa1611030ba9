package codemode_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/dshd/dshd/pkg/codemode"
	"github.com/dshd/dshd/pkg/registry"
)

// TestRunCodeWaitsForAProgramSlot: run_code programs shared the server's cores with no bound
// (issue 17, finding 4: one tenant's programs took every core from other tenants' turns). With
// MaxConcurrent 1 and one program running (held in a tool call), a second call waits for the
// slot: cancelled or timed out while it waits it fails with the documented message and holds
// nothing, and once the first program ends the next call runs at once.
func TestRunCodeWaitsForAProgramSlot(t *testing.T) {
	t.Parallel()
	g := newGate()
	fx := newFixture(t, registry.ModeCode, codemode.Config{MaxConcurrent: 1}, g.tool(t, "gate", true))
	queued := make(chan struct{}, 10)
	codemode.OnQueued(fx.rt, func() { queued <- struct{}{} })

	first := make(chan *registry.Result, 1)
	go func() {
		first <- fx.reg.Execute(context.Background(), fx.input("c1", `return await tools.gate({text: "one"});`))
	}()
	<-g.started // the first program holds the slot

	for _, c := range []struct {
		name, want string
		ctx        *endable
	}{
		{"cancelled", "code run failed (abort): the run_code call was cancelled while it waited for a program slot (this replica runs at most 1 programs at once)",
			newEndable(context.Canceled)},
		{"timed out", "code run failed (timeout): the run_code call timed out while it waited for a program slot",
			newEndable(context.DeadlineExceeded)},
	} {
		res := make(chan *registry.Result, 1)
		go func() { res <- fx.reg.Execute(c.ctx, fx.input("c-"+c.name, `return 2;`)) }()
		<-queued
		c.ctx.end()
		if r := <-res; !r.IsError || !strings.Contains(text(r.Content), c.want) {
			t.Fatalf("%s while waiting: %q, want %q", c.name, text(r.Content), c.want)
		}
	}

	close(g.release)
	if v := mustValue(t, <-first); string(v.Result) != `"one"` {
		t.Fatalf("first program's result %s", v.Result)
	}
	if v := mustValue(t, fx.run(context.Background(), `return 3;`)); string(v.Result) != "3" {
		t.Fatalf("a program after the others: %s", v.Result)
	}
}

// endable is a context the test ends when it chooses, with err: context.DeadlineExceeded stands
// for a timeout that passes exactly then.
type endable struct {
	context.Context
	err  error
	done chan struct{}
	once sync.Once
}

func newEndable(err error) *endable {
	return &endable{Context: context.Background(), err: err, done: make(chan struct{})}
}

func (e *endable) Done() <-chan struct{} { return e.done }

func (e *endable) Err() error {
	select {
	case <-e.done:
		return e.err
	default:
		return nil
	}
}

func (e *endable) end() { e.once.Do(func() { close(e.done) }) }
