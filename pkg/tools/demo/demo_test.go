package demo_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/tools/demo"
)

func tools(t *testing.T) map[string]*registry.Tool {
	t.Helper()
	ts, err := demo.Tools()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]*registry.Tool{}
	for _, tl := range ts {
		m[tl.Name] = tl
	}
	return m
}

func TestFailFailsWithAPlainError(t *testing.T) {
	t.Parallel()
	fail := tools(t)["fail"]
	_, err := fail.Execute(context.Background(), &registry.Execution{Args: json.RawMessage(`{"text":"it broke"}`)})
	var coded registry.Coded
	if err == nil || err.Error() != "it broke" || errors.As(err, &coded) {
		t.Fatalf("fail: %v (coded %v)", err, coded)
	}
	if fail.IsConcurrencySafe != nil {
		t.Error("fail is parallel")
	}
}

func TestWaitIsParallelAndHonoursCancel(t *testing.T) {
	t.Parallel()
	m := tools(t)
	args := json.RawMessage(`{"ms":60000,"text":"late"}`)
	if w := m["wait"]; w.IsConcurrencySafe == nil || !w.IsConcurrencySafe(args) {
		t.Fatal("wait is not parallel")
	}
	if s := m["sleep"]; s.IsConcurrencySafe != nil {
		t.Fatal("sleep is parallel")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := m["wait"].Execute(ctx, &registry.Execution{Args: args})
	var coded registry.Coded
	if !errors.As(err, &coded) || coded.ErrorInfo().Code != "ABORTED" {
		t.Fatalf("cancelled wait: %v", err)
	}
	out, err := m["wait"].Execute(context.Background(), &registry.Execution{Args: json.RawMessage(`{"ms":1,"text":"done"}`)})
	if err != nil || string(out) != `"done"` {
		t.Fatalf("wait: %s %v", out, err)
	}
}
