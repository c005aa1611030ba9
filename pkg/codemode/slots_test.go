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
// MaxConcurrent 1 and the slot held, a call waits: cancelled or timed out while it waits it fails
// with the documented message and holds nothing, and once the slot is given back the waiting
// call runs.
func TestRunCodeWaitsForAProgramSlot(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, registry.ModeCode, codemode.Config{MaxConcurrent: 1})
	queued := make(chan struct{}, 10)
	codemode.OnQueued(fx.rt, func() { queued <- struct{}{} })
	slots := codemode.Slots(fx.rt)
	holder := slots.Enqueue("other tenant")

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

	res := make(chan *registry.Result, 1)
	go func() { res <- fx.run(context.Background(), `return 3;`) }()
	<-queued
	holder.Release()
	if v := mustValue(t, <-res); string(v.Result) != "3" {
		t.Fatalf("the program that waited: %s", v.Result)
	}
	if again := slots.Enqueue("other tenant"); !ready(again) {
		t.Fatal("a slot is still held after every program ended")
	} else {
		again.Release()
	}
}

// TestRunCodeHoldsNoSlotWhileItWaitsForTools: a program waiting for a tool call computes nothing,
// so it gives its slot back meanwhile: with MaxConcurrent 1, a second program runs to its end
// while the first waits in a tool, and the first then goes on with the tool's result.
func TestRunCodeHoldsNoSlotWhileItWaitsForTools(t *testing.T) {
	t.Parallel()
	g := newGate()
	fx := newFixture(t, registry.ModeCode, codemode.Config{MaxConcurrent: 1}, g.tool(t, "gate", true))
	first := make(chan *registry.Result, 1)
	go func() {
		first <- fx.reg.Execute(context.Background(), fx.input("c1", `const a = await tools.gate({text: "one"}); return a + "!";`))
	}()
	<-g.started
	if v := mustValue(t, fx.reg.Execute(context.Background(), fx.input("c2", `return 2;`))); string(v.Result) != "2" {
		t.Fatalf("second program: %s", v.Result)
	}
	close(g.release)
	if v := mustValue(t, <-first); string(v.Result) != `"one!"` {
		t.Fatalf("first program: %s", v.Result)
	}
}

func ready(tk interface{ Ready() <-chan struct{} }) bool {
	select {
	case <-tk.Ready():
		return true
	default:
		return false
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
