package promptasm

import (
	"context"
	"fmt"
	"slices"

	"github.com/dshd/dshd/pkg/llm"
)

// Mode is a tool presentation mode (PRS-1).
type Mode string

// Presentation modes. The zero Mode means ModeNative.
const (
	ModeNative Mode = "native"
	ModeCode   Mode = "code"
	ModeBoth   Mode = "both"
)

// RunCodeTool is the name of the reserved code-mode tool.
const RunCodeTool = "run_code"

// Code runtime languages that have an SDK renderer (PRS-4).
const (
	LanguageTypeScript = "typescript"
	LanguagePython     = "python"
)

// CodeRuntime describes the mounted code runtime to a code or both assembly (PRS-3, PRS-4).
type CodeRuntime struct {
	// Language is LanguageTypeScript or LanguagePython.
	Language string
	// Tool is the run_code schema in the language's wording; its name must be RunCodeTool. It
	// replaces any run_code schema a tool provider returns.
	Tool llm.ToolSchema
	// RenderSDKFunc renders the tools:sdk section from the native visible tools, sorted by name
	// and without run_code. An error fails the assembly.
	RenderSDKFunc func(ctx context.Context, in Input, tools []llm.ToolSchema) (string, error)
}

// mode returns the effective mode of in and checks that a non-native mode has a usable runtime.
func (in Input) mode() (Mode, error) {
	m := in.Mode
	switch m {
	case "":
		return ModeNative, nil
	case ModeNative:
		return m, nil
	case ModeCode, ModeBoth:
	default:
		return "", fmt.Errorf("%w: %q (want native, code or both)", ErrInvalidMode, clip(string(m)))
	}
	rt := in.CodeRuntime
	switch {
	case rt == nil:
		return "", fmt.Errorf("%w: mode %s needs a code runtime and none is mounted", ErrCodeRuntime, m)
	case rt.Language != LanguageTypeScript && rt.Language != LanguagePython:
		return "", fmt.Errorf("%w: no SDK renderer for language %q (want typescript or python)", ErrCodeRuntime, rt.Language)
	case rt.RenderSDKFunc == nil:
		return "", fmt.Errorf("%w: the %s runtime has no SDK renderer", ErrCodeRuntime, rt.Language)
	case rt.Tool.Name != RunCodeTool:
		return "", fmt.Errorf("%w: the runtime's tool is named %q, want %q", ErrCodeRuntime, rt.Tool.Name, RunCodeTool)
	}
	return m, nil
}

// present turns the native tools and known names into the mode's wire tools and the names
// toolOrder may list (PRS-3). native and known must not hold run_code in a non-native mode.
func present(m Mode, rt *CodeRuntime, native []llm.ToolSchema, known map[string]bool) ([]llm.ToolSchema, map[string]bool) {
	switch m {
	case ModeCode:
		return []llm.ToolSchema{reduceTool(rt.Tool)}, map[string]bool{RunCodeTool: true}
	case ModeBoth:
		known[RunCodeTool] = true
		return append(slices.Clip(native), reduceTool(rt.Tool)), known
	default:
		return native, known
	}
}

// modeSections returns the extra sections of a non-native mode: tools:code-only (empty in both)
// and tools:sdk, rendered lazily from the native tools.
func modeSections(m Mode, rt *CodeRuntime, native []llm.ToolSchema) []Section {
	if m == ModeNative {
		return nil
	}
	codeOnly := CodeOnlyText
	if m == ModeBoth {
		codeOnly = ""
	}
	sdkTools := slices.Clone(native)
	sortTools(sdkTools)
	return []Section{
		{Name: SectionCodeOnly, Order: OrderCodeOnly, Text: codeOnly},
		{Name: SectionSDK, Order: OrderSDK, TextFunc: func(ctx context.Context, in Input) (string, error) {
			return rt.RenderSDKFunc(ctx, in, sdkTools)
		}},
	}
}
