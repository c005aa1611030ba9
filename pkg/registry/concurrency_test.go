package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/dshd/dshd/pkg/kernel"
)

func TestScenario09_ApproverFailureIsFinalAndNothingDispatched(t *testing.T) {
	t.Parallel()
	// The durable approver (pkg/approval) throws when the session has no open turn (APR-2).
	// Through the pipeline that throw is a final error: the body never runs and post-execute
	// is skipped (PIPE-6).
	e := newEnv(t, Config{})
	runs := 0
	e.register(e.g, echoTool(t, &runs))
	e.pre(e.g, Ask("why"))
	e.r.MountApprover(ApproverFunc(func(context.Context, ApprovalRequest) (string, error) {
		return "", errors.New("approval: session has no open turn")
	}))
	var c counters
	e.count(&c)
	p := e.r.Prepare(e.ctx, Input{CallID: "c", Name: "echo", Args: json.RawMessage(`{"text":"x"}`), Agent: "a"})
	r := e.r.Finish(e.ctx, p)
	if p.Kind != PrepFinalResult || contentText(r) != "Error: approval: session has no open turn" || runs != 0 || c.post != 0 {
		t.Fatalf("got %v %+v runs=%d %+v", p.Kind, r, runs, c)
	}
}

func TestSCHED9_ConcurrentDispatchIsSafe(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, echoTool(t, nil))
	kernel.Listen(e.g, e.r.Hooks.Execute, func(ctx context.Context, x *Execution, next func(context.Context) (*Result, error)) (*Result, error) {
		x.DeferContext(userMsg("w-" + x.CallID))
		return next(ctx)
	})
	var wg sync.WaitGroup
	results := make([]*Result, 32)
	for i := range results {
		p := e.r.Prepare(e.ctx, Input{CallID: fmt.Sprint(i), Name: "echo", Args: json.RawMessage(fmt.Sprintf(`{"text":"%d"}`, i))})
		wg.Go(func() {
			results[i] = e.r.Finalize(e.ctx, e.r.Dispatch(e.ctx, p))
		})
	}
	wg.Wait()
	for i, r := range results {
		if contentText(r) != fmt.Sprint(i) || ctxIDs(r) != fmt.Sprintf("w-%d", i) {
			t.Fatalf("%d: %+v", i, r)
		}
	}
}

func TestPIPE10_PanicLoggedWithStack(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	e := newEnv(t, Config{Logger: log})
	tool := rawTool("p", `1`, nil)
	tool.Execute = func(context.Context, *Execution) (json.RawMessage, error) { panic("tool exploded") }
	e.register(e.g, tool)
	r := e.exec("p", `{}`)
	if !r.IsError || r.Error.Message != "panic: tool exploded" {
		t.Fatalf("got %+v", r.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	if out := buf.String(); !strings.Contains(out, "tool exploded") || !strings.Contains(out, "goroutine") {
		t.Fatalf("stack not logged: %s", out)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
