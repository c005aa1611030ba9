package registry

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
)

func TestRES1_SuccessShape(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, echoTool(t, nil))
	r := e.exec("echo", `{"text":"a"}`)
	if r.IsError || r.Error != nil || r.Value == nil || len(r.Content) != 1 || r.ConcludesTurn {
		t.Fatalf("got %+v", r)
	}
}

func TestRES2_FailureHasNoValueOrConcludesTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	tool := failingTool("t", errExploded)
	tool.Execute = func(_ context.Context, x *Execution) (json.RawMessage, error) {
		x.ConcludeTurn()
		return nil, errExploded
	}
	e.register(e.g, tool)
	r := e.exec("t", `{}`)
	if !r.IsError || r.Value != nil || r.ConcludesTurn || r.Error == nil {
		t.Fatalf("got %+v", r)
	}
}

func TestRES3_FailureContentEnvelope(t *testing.T) {
	t.Parallel()
	cases := map[string]*Result{
		"Error: tool call aborted before dispatch":     AbortedBeforeDispatchResult(),
		"Error: tool call aborted":                     abortedResult(),
		`Error: unknown tool "x"`:                      unknownToolResult("x"),
		"Error: tool call timed out after 7ms":         timeoutResult(7),
		`Error: tool "x" returned invalid output: bad`: invalidOutput("x", "bad"),
	}
	for want, r := range cases {
		if !r.IsError || len(r.Content) != 1 || r.Content[0].Text != want {
			t.Errorf("got %+v want %q", r.Content, want)
		}
	}
	if i := AbortedBeforeDispatchResult().ErrorInfo(); *i != (fault.Info{Name: NameAbort, Code: fault.CodeAbortedBeforeDispatch}) {
		t.Fatalf("SCHED-6 info %+v", i)
	}
}

func TestRES4_ResultValueIsLosslessCopyOwnedByResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("bad", `{"a":`, nil))
	if r := e.exec("bad", `{}`); code(r) != fault.CodeInvalidToolOutput {
		t.Fatalf("non-JSON value accepted: %+v", r)
	}
	e.register(e.g, rawTool("utf", "\"\xff\"", nil))
	if r := e.exec("utf", `{}`); code(r) != fault.CodeInvalidToolOutput {
		t.Fatalf("invalid UTF-8 accepted: %+v", r)
	}
}

func TestRES5_ConcludeTurnOnlyOnSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	tool := rawTool("t", `1`, nil)
	tool.Execute = func(_ context.Context, x *Execution) (json.RawMessage, error) {
		x.ConcludeTurn()
		return json.RawMessage(`1`), nil
	}
	e.register(e.g, tool)
	if r := e.exec("t", `{}`); !r.ConcludesTurn {
		t.Fatal("mark lost")
	}
	e.post(func(*Call) PostDecision {
		return PostDecision{Kind: PostBlock, Feedback: []llm.Block{llm.TextBlock("b")}}
	})
	if r := e.exec("t", `{}`); r.ConcludesTurn {
		t.Fatal("mark survived a failure")
	}
}

func TestRES6_CommitOrder(t *testing.T) {
	t.Parallel()
	var asked []string
	next := int64(41)
	e := newEnv(t, Config{CommitOrderFunc: func(agent string) int64 { asked = append(asked, agent); next++; return next }})
	tool := rawTool("t", `1`, nil)
	tool.Execute = func(_ context.Context, x *Execution) (json.RawMessage, error) {
		x.RecordFileMutation(FileMutation{Path: "p", CommitOrder: 999, Version: 7})
		return json.RawMessage(`1`), nil
	}
	e.register(e.g, tool)
	r := e.r.Execute(e.ctx, Input{CallID: "c", Name: "t", Args: json.RawMessage(`{}`), Agent: "ag"})
	if len(r.Mutations) != 1 || r.Mutations[0] != (FileMutation{Version: 1, CommitOrder: 42, Path: "p"}) || asked[0] != "ag" {
		t.Fatalf("got %+v %v", r.Mutations, asked)
	}
}

func TestRES7_TimeoutOnlyFromPolicy(t *testing.T) {
	t.Parallel()
	// TimeoutMs 0 and no default: the body runs unbounded and its success stands.
	e := newEnv(t, Config{})
	tool := rawTool("t", `1`, nil)
	tool.Execute = func(ctx context.Context, _ *Execution) (json.RawMessage, error) {
		if _, has := ctx.Deadline(); has {
			t.Error("unexpected deadline")
		}
		return json.RawMessage(`1`), nil
	}
	e.register(e.g, tool)
	if r := e.exec("t", `{}`); r.IsError {
		t.Fatalf("got %+v", r)
	}
}
