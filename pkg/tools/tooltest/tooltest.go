// Package tooltest runs built-in tools through a real registry pipeline, for the tools' tests.
package tooltest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/registry"
)

// Registry is a registry with the given tools registered globally.
type Registry struct {
	reg   *registry.Registry
	calls atomic.Int64
}

// New registers tools in a fresh registry; it fails the test on an error.
func New(t testing.TB, tools ...*registry.Tool) *Registry {
	t.Helper()
	k := kernel.New(nil)
	reg, err := registry.New(registry.Config{Scopes: k.Scopes()})
	if err != nil {
		t.Fatal(err)
	}
	g := k.Fiber("tools", nil)
	for _, tl := range tools {
		if _, err := reg.Register(g, tl); err != nil {
			t.Fatalf("register %s: %v", tl.Name, err)
		}
	}
	return &Registry{reg: reg}
}

// Call runs one call of name with args (a value marshalled to JSON) as agent, through the whole
// pipeline, and returns its final result.
func (r *Registry) Call(ctx context.Context, t testing.TB, agent, name string, args any) *registry.Result {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	id := r.calls.Add(1)
	return r.reg.Execute(ctx, registry.Input{CallID: fmt.Sprintf("call-%d", id), Name: name, Args: raw, Agent: agent})
}

// Text is the result's content as one string.
func Text(res *registry.Result) string {
	var b strings.Builder
	for _, bl := range res.Content {
		b.WriteString(bl.Text)
	}
	return b.String()
}

// Code is the result's error code, "" when it has none.
func Code(res *registry.Result) string {
	if info := res.ErrorInfo(); info != nil {
		return info.Code
	}
	return ""
}
