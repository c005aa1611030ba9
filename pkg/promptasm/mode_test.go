package promptasm

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/llm"
)

func TestPRS3_CodeModeWireToolsAndSections(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{})
	must(t)(r.Tools(Global, staticTools("write", "echo", RunCodeTool)))
	must(t)(r.Section(Global, Section{Name: "tool:echo", Order: 100, Text: "Echo guidance."}))
	var sdkGot string
	rt := tsRuntime()
	render := rt.RenderSDKFunc
	rt.RenderSDKFunc = func(ctx context.Context, in Input, tools []llm.ToolSchema) (string, error) {
		sdkGot = toolNamesOf(tools)
		return render(ctx, in, tools)
	}
	res := assemble(t, r, Input{Mode: ModeCode, CodeRuntime: rt})
	if toolNamesOf(res.Tools) != RunCodeTool || res.Tools[0].Description != rt.Tool.Description {
		t.Fatalf("wire tools = %+v", res.Tools)
	}
	if got := sectionNames(res.Sections); got != "harness:identity,tools:code-only,tool:echo,tools:sdk" {
		t.Fatalf("sections = %s", got)
	}
	if sdkGot != "echo,write" {
		t.Fatalf("SDK renderer got %s, want echo,write", sdkGot)
	}
	if !strings.Contains(res.System, CodeOnlyText) {
		t.Fatalf("code-only text missing: %q", res.System)
	}
	assembleErr(t, r, Input{Mode: ModeCode, CodeRuntime: rt, ToolOrder: []string{"echo", ToolOrderRest}}, ErrUnknownTool)
	if got := assemble(t, r, Input{Mode: ModeCode, CodeRuntime: rt, ToolOrder: []string{RunCodeTool, ToolOrderRest}}); toolNamesOf(got.Tools) != RunCodeTool {
		t.Fatalf("ordered wire tools = %s", toolNamesOf(got.Tools))
	}
}

func TestPRS3_BothModeAddsRunCode(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{})
	must(t)(r.Tools(Global, staticTools("write", "echo")))
	rt := tsRuntime()
	res := assemble(t, r, Input{Mode: ModeBoth, CodeRuntime: rt})
	if got := toolNamesOf(res.Tools); got != "echo,run_code,write" {
		t.Fatalf("wire tools = %s", got)
	}
	if got := sectionNames(res.Sections); got != "harness:identity,tools:sdk" {
		t.Fatalf("sections = %s (tools:code-only must render empty)", got)
	}
	in := Input{Mode: ModeBoth, CodeRuntime: rt, ToolOrder: []string{RunCodeTool, ToolOrderRest, "echo"}}
	if got := toolNamesOf(assemble(t, r, in).Tools); got != "run_code,write,echo" {
		t.Fatalf("ordered wire tools = %s", got)
	}
	native := assemble(t, r, Input{ToolOrder: []string{ToolOrderRest}})
	if toolNamesOf(native.Tools) != "echo,write" || sectionNames(native.Sections) != "harness:identity" {
		t.Fatalf("native: tools %s, sections %s", toolNamesOf(native.Tools), sectionNames(native.Sections))
	}
	assembleErr(t, r, Input{ToolOrder: []string{RunCodeTool, ToolOrderRest}}, ErrUnknownTool)
}

func TestPRS3_RegisteredSectionShadowsModeSection(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{IncludeHarnessIdentity: new(false)})
	must(t)(r.Section("preset", Section{Name: SectionSDK, Order: OrderSDK, Text: "Custom SDK notes."}))
	res := assemble(t, r, Input{Chain: Chain{"preset"}, Mode: ModeCode, CodeRuntime: tsRuntime()})
	if res.System != CodeOnlyText+"\n\nCustom SDK notes." {
		t.Fatalf("System = %q", res.System)
	}
}

func TestPRS4_NonNativeModeNeedsAUsableRuntime(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{})
	must(t)(r.Tools(Global, staticTools("echo")))
	noRenderer := tsRuntime()
	noRenderer.RenderSDKFunc = nil
	wrongTool := tsRuntime()
	wrongTool.Tool.Name = "exec"
	ruby := tsRuntime()
	ruby.Language = "ruby"
	python := tsRuntime()
	python.Language = LanguagePython
	failing := tsRuntime()
	failing.RenderSDKFunc = func(context.Context, Input, []llm.ToolSchema) (string, error) {
		return "", errors.New("bad schema")
	}
	for _, m := range []Mode{ModeCode, ModeBoth} {
		assembleErr(t, r, Input{Mode: m}, ErrCodeRuntime)
		assembleErr(t, r, Input{Mode: m, CodeRuntime: ruby}, ErrCodeRuntime)
		assembleErr(t, r, Input{Mode: m, CodeRuntime: noRenderer}, ErrCodeRuntime)
		assembleErr(t, r, Input{Mode: m, CodeRuntime: wrongTool}, ErrCodeRuntime)
		if ae := assembleErr(t, r, Input{Mode: m, CodeRuntime: failing}, nil); !strings.Contains(ae.Error(), "bad schema") {
			t.Errorf("renderer error = %q", ae.Error())
		}
		assemble(t, r, Input{Mode: m, CodeRuntime: python})
	}
	assembleErr(t, r, Input{Mode: "fancy"}, ErrInvalidMode)
	assemble(t, r, Input{Mode: ModeNative})
}

func TestScenario30_CodeModePrompt(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{})
	must(t)(r.Tools(Global, staticTools("echo")))
	must(t)(r.Section(Global, Section{Name: "tool:echo", Order: 100, Text: "Use echo to repeat text."}))
	res := assemble(t, r, Input{Mode: ModeCode, CodeRuntime: tsRuntime()})
	if toolNamesOf(res.Tools) != RunCodeTool {
		t.Fatalf("wire tools = %s", toolNamesOf(res.Tools))
	}
	var sdk string
	for _, s := range res.Sections {
		if s.Name == SectionSDK {
			sdk = s.Text
		}
	}
	if !strings.Contains(sdk, "declare const tools") || !strings.Contains(sdk, "echo") || strings.Contains(sdk, "run_code:") {
		t.Fatalf("tools:sdk = %q", sdk)
	}
	if i, j := strings.Index(res.System, CodeOnlyText), strings.Index(res.System, "Use echo"); i < 0 || i > j {
		t.Fatalf("tools:code-only must come before the tool guidance: %q", res.System)
	}
}
