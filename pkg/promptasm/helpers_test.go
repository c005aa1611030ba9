package promptasm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/llm"
)

func newRegistry(t testing.TB, cfg Config) *Registry {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

// must fails the test on a registration error and returns the disposer.
func must(t testing.TB) func(func(), error) func() {
	return func(dispose func(), err error) func() {
		t.Helper()
		if err != nil {
			t.Fatalf("register: %v", err)
		}
		return dispose
	}
}

func assemble(t testing.TB, r *Registry, in Input) Result {
	t.Helper()
	res, err := r.Assemble(context.Background(), in)
	if err != nil {
		t.Fatalf("Assemble: %v", err)
	}
	return res
}

// assembleErr asserts that Assemble fails with an *AssemblyError matching target.
func assembleErr(t testing.TB, r *Registry, in Input, target error) *AssemblyError {
	t.Helper()
	_, err := r.Assemble(context.Background(), in)
	var ae *AssemblyError
	if !errors.As(err, &ae) {
		t.Fatalf("Assemble error = %v, want an *AssemblyError", err)
	}
	if target != nil && !errors.Is(err, target) {
		t.Fatalf("Assemble error = %v, want %v", err, target)
	}
	return ae
}

func schema(name string) llm.ToolSchema {
	return llm.ToolSchema{Name: name, Description: "Tool " + name + ".",
		Parameters: []byte(`{"type":"object","properties":{"text":{"type":"string"}}}`)}
}

func staticTools(names ...string) ToolProviderFunc {
	return func(context.Context, Input) (ToolSet, error) {
		set := ToolSet{}
		for _, n := range names {
			set.Schemas = append(set.Schemas, schema(n))
		}
		return set, nil
	}
}

func toolNamesOf(tools []llm.ToolSchema) string { return strings.Join(toolNames(tools), ",") }

func sectionNames(sections []SectionText) string {
	names := make([]string, len(sections))
	for i, s := range sections {
		names[i] = s.Name
	}
	return strings.Join(names, ",")
}

func constVar(v string) VariableFunc {
	return func(context.Context, Input) (string, bool) { return v, true }
}

// tsRuntime is a code runtime whose SDK renderer lists the tools it is given.
func tsRuntime() *CodeRuntime {
	return &CodeRuntime{
		Language: LanguageTypeScript,
		Tool: llm.ToolSchema{Name: RunCodeTool, Description: "Run a TypeScript program against the tools.",
			Parameters: []byte(`{"type":"object","properties":{"code":{"type":"string"},"description":{"type":"string"}},"required":["code","description"]}`)},
		RenderSDKFunc: func(_ context.Context, _ Input, tools []llm.ToolSchema) (string, error) {
			var b strings.Builder
			b.WriteString("```ts\ndeclare const tools: {\n")
			for _, t := range tools {
				fmt.Fprintf(&b, "  /** %s */\n  %s(args: unknown): Promise<unknown>;\n", t.Description, t.Name)
			}
			b.WriteString("}\n```")
			return b.String(), nil
		},
	}
}
