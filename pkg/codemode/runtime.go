package codemode

import (
	"context"
	"encoding/json"

	"github.com/dshd/dshd/pkg/fairq"
	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/promptasm"
	"github.com/dshd/dshd/pkg/registry"
)

// Runtime is the code-mode runtime: the mount point of `run_code` and of the SDK. It holds only
// its configuration and hooks, so one Runtime may be installed in any number of registries and
// is safe for concurrent use; every run gets a fresh engine (CODE-13).
type Runtime struct {
	cfg   Config
	slots *fairq.Queue // the replica's program slots (slots.go)

	// onQueued, when set (tests), is called when a call starts waiting for a slot.
	onQueued func()

	// DispatchLog is the tools/code-dispatch-log waterfall (CODE-7): it may replace the content
	// a `tool/code-dispatch` event logs for a sub-call (the *registry.Call carries the sub-call's
	// execution and final result; the default returns the result's content). A listener that
	// fails or panics leaves the original content.
	DispatchLog *kernel.Waterfall[*registry.Call, []llm.Block]
}

// New returns a Runtime. It fails for a Config with an unknown language or a negative limit.
func New(cfg Config) (*Runtime, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	slots, err := fairq.New(cfg.MaxConcurrent, 0)
	if err != nil {
		return nil, err
	}
	rt := &Runtime{cfg: cfg, slots: slots}
	rt.DispatchLog = kernel.NewWaterfall("tools/code-dispatch-log",
		func(_ context.Context, c *registry.Call) ([]llm.Block, error) { return c.Result.Content, nil })
	return rt, nil
}

// Language is the language programs are written in: "typescript".
func (rt *Runtime) Language() string { return rt.cfg.Language }

// Config returns the runtime's configuration, defaults applied.
func (rt *Runtime) Config() Config { return rt.cfg }

// SubCallsFunc returns the maxParallelSubCalls of an agent (PRS-1); a value below 1 means the
// registry's Config.MaxParallelSubCalls.
type SubCallsFunc func(agent string) int

// Install installs `run_code` in reg through f (registry.InstallRunCode): visible to scopes
// whose mode is code or both (REG-5). subCalls gives an agent's sub-call cap; nil means the
// registry's for every agent. tenant gives an agent's tenant, by which programs wait for a slot
// fairly (slots.go); nil queues every agent's programs as of one tenant. The disposer (also run
// when f is disposed) uninstalls it.
func (rt *Runtime) Install(f *kernel.Fiber, reg *registry.Registry, subCalls SubCallsFunc, tenant TenantFunc) (kernel.Disposer, error) {
	return reg.InstallRunCode(f, rt.Tool(reg, subCalls, tenant))
}

// Tool returns the `run_code` definition whose programs call the tools of reg (CODE-1, CODE-2:
// it has no concurrency classifier, so it is always exclusive). Its programs share the
// runtime's slots with those of every other definition of the runtime.
func (rt *Runtime) Tool(reg *registry.Registry, subCalls SubCallsFunc, tenant TenantFunc) *registry.Tool {
	b := &binding{rt: rt, reg: reg, subCalls: subCalls, tenant: tenant}
	s := rt.Schema()
	return &registry.Tool{
		Name: registry.RunCodeName, Description: s.Description, Parameters: s.Parameters,
		Output:  &registry.Output{Schema: json.RawMessage(outputSchema), Render: render},
		Execute: b.execute,
	}
}

// Schema is the `run_code` wire schema in the runtime's language (CODE-1).
func (rt *Runtime) Schema() llm.ToolSchema {
	return llm.ToolSchema{Name: registry.RunCodeName, Description: toolDescription,
		Parameters: json.RawMessage(toolParameters)}
}

// PromptRuntime describes the runtime to prompt assembly (PRS-3, PRS-4): its language, the
// run_code schema, and the SDK renderer, which reads the output schemas of the tools from reg
// in the scope the assembly runs in (the last element of its chain, as pkg/agents names its
// scopes). A code or both assembly with it gets the tools:code-only and tools:sdk sections.
func (rt *Runtime) PromptRuntime(reg *registry.Registry) *promptasm.CodeRuntime {
	return &promptasm.CodeRuntime{
		Language: rt.cfg.Language,
		Tool:     rt.Schema(),
		RenderSDKFunc: func(_ context.Context, in promptasm.Input, tools []llm.ToolSchema) (string, error) {
			scope := ""
			if len(in.Chain) > 0 {
				scope = in.Chain[len(in.Chain)-1]
			}
			return RenderSDK(tools, func(name string) json.RawMessage {
				if t, ok := reg.Get(name, scope); ok && t.Output != nil {
					return t.Output.Schema
				}
				return nil
			}), nil
		},
	}
}
