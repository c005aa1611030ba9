package codemode_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/codemode"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/promptasm"
	"github.com/dshd/dshd/pkg/registry"
)

// assembler is prompt assembly over the fixture's registry, as pkg/agents sets it up: the scope's
// schemas as the tool provider, and a guidance section at order 100.
func (fx *fixture) assembler(t *testing.T) *promptasm.Registry {
	t.Helper()
	pr, err := promptasm.New(promptasm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pr.Tools(promptasm.Global, func(_ context.Context, in promptasm.Input) (promptasm.ToolSet, error) {
		s, err := fx.reg.Schemas(in.Chain[len(in.Chain)-1])
		return promptasm.ToolSet{Schemas: s, KnownNames: fx.reg.Names("")}, err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := pr.Section(promptasm.Global, promptasm.Section{Name: "tool:echo", Order: 100, Text: "Use echo to repeat text."}); err != nil {
		t.Fatal(err)
	}
	return pr
}

func (fx *fixture) prompt(t *testing.T, mode promptasm.Mode, rt *promptasm.CodeRuntime) (promptasm.Result, error) {
	t.Helper()
	return fx.assembler(t).Assemble(context.Background(), promptasm.Input{Chain: promptasm.Chain{agentScope}, Mode: mode, CodeRuntime: rt})
}

func TestPRS3_WireToolsAndSectionsPerMode(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, registry.ModeCode, codemode.Config{})
	res, err := fx.prompt(t, promptasm.ModeCode, fx.rt.PromptRuntime(fx.reg))
	if err != nil {
		t.Fatal(err)
	}
	if toolNames(res.Tools) != "run_code" || res.Tools[0].Description != fx.rt.Schema().Description {
		t.Fatalf("code wire tools = %s", toolNames(res.Tools))
	}
	if got := sectionNames(res.Sections); got != "harness:identity,tools:code-only,tool:echo,tools:sdk" {
		t.Fatalf("code sections = %s", got)
	}
	sdk := res.Sections[3].Text
	if !strings.Contains(sdk, "declare const tools") || !strings.Contains(sdk, "  echo: ") || !strings.Contains(sdk, "  sleep: ") ||
		strings.Contains(sdk, "run_code:") {
		t.Fatalf("SDK:\n%s", sdk)
	}
	if names := fx.reg.Names(agentScope); strings.Join(names, ",") != "echo,run_code,sleep" {
		t.Fatalf("the catalogue keeps every tool plus run_code: %v", names)
	}

	both := newFixture(t, registry.ModeBoth, codemode.Config{})
	res, err = both.prompt(t, promptasm.ModeBoth, both.rt.PromptRuntime(both.reg))
	if err != nil {
		t.Fatal(err)
	}
	if toolNames(res.Tools) != "echo,run_code,sleep" || sectionNames(res.Sections) != "harness:identity,tool:echo,tools:sdk" {
		t.Fatalf("both: tools %s, sections %s (tools:code-only renders empty)", toolNames(res.Tools), sectionNames(res.Sections))
	}
}

func TestPRS4_AssemblyNeedsAMountedRuntime(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, registry.ModeCode, codemode.Config{})
	for _, m := range []promptasm.Mode{promptasm.ModeCode, promptasm.ModeBoth} {
		if _, err := fx.prompt(t, m, nil); !errors.Is(err, promptasm.ErrCodeRuntime) {
			t.Fatalf("%s without a runtime: %v", m, err)
		}
		if _, err := fx.prompt(t, m, fx.rt.PromptRuntime(fx.reg)); err != nil {
			t.Fatalf("%s with the runtime: %v", m, err)
		}
	}
	pr := fx.rt.PromptRuntime(fx.reg)
	if pr.Language != "typescript" || pr.Tool.Name != "run_code" {
		t.Fatalf("runtime = %+v", pr)
	}
}

func TestPRS5_DirectCallsCollapseUnderCodeOnly(t *testing.T) {
	t.Parallel()
	for _, m := range []registry.PresentMode{registry.ModeCode, registry.ModeBoth} {
		fx := newFixture(t, m, codemode.Config{})
		pre := 0
		if _, err := kernel.Listen(fx.f, fx.reg.Hooks.PreExecute, kernel.WaterfallFunc[*registry.Execution, registry.Decision](
			func(ctx context.Context, e *registry.Execution, next func(context.Context) (registry.Decision, error)) (registry.Decision, error) {
				if e.Name == "echo" {
					pre++
				}
				return next(ctx)
			})); err != nil {
			t.Fatal(err)
		}
		res := fx.reg.Execute(context.Background(), registry.Input{CallID: "d1", Name: "echo", Args: json.RawMessage(`{"text":"hi"}`), Scope: agentScope})
		if m == registry.ModeBoth {
			if res.IsError || pre != 1 {
				t.Fatalf("both executes directly: %q (pre-execute ran %d times)", text(res.Content), pre)
			}
			continue
		}
		if res.ErrorInfo() == nil || res.ErrorInfo().Code != fault.CodeUnknownTool || pre != 0 ||
			res.Error.Message != "unknown tool \"echo\": only `run_code` is callable directly — call `echo` from inside a `run_code` program instead" {
			t.Fatalf("code: %q, pre-execute ran %d times", text(res.Content), pre)
		}
		if sub := fx.run(context.Background(), `return await tools.echo({text: "inside"});`); text(sub.Content) != "inside" || pre != 1 {
			t.Fatalf("inside a program: %q", text(sub.Content))
		}
	}
}
