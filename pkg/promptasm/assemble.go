package promptasm

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/dshd/dshd/pkg/llm"
)

// Input is what the caller supplies for one assembly. Every provider receives it.
type Input struct {
	// Chain selects the scoped layers, farthest first. Empty means the global layer only.
	Chain Chain
	// Provider, Model and CWD are the values of the built-in variables of the same names; an
	// empty string means no value (PRM-10).
	Provider, Model, CWD string
	// Mode is the presentation mode; empty means native. Code and both need CodeRuntime.
	Mode        Mode
	CodeRuntime *CodeRuntime
	// ToolOrder, when non-nil, replaces Config.ToolOrder for this assembly (for example a
	// preset's). It is validated like Config.ToolOrder.
	ToolOrder []string
	// Agent is the agent (session) the prompt is assembled for, "" for none: providers that
	// state per-agent facts (the approval policy in force) look them up by it.
	Agent string
}

// SectionText is a named, ordered piece of prompt text: a section or runtime-context entry of
// an Assembly (not yet interpolated) or of a Result (rendered).
type SectionText struct {
	Name  string
	Order float64
	Text  string
}

// Value is a variable's value in one assembly. Absent means registered but without a value.
type Value struct {
	Text   string
	Absent bool
}

// Assembly is the prompt input before rendering, as the assemble waterfall sees it. Sections and
// Contexts are sorted by order and not yet interpolated; Tools are the ordered wire tools.
type Assembly struct {
	Sections  []SectionText
	Contexts  []SectionText
	Tools     []llm.ToolSchema
	Variables map[string]Value
}

// Result is a rendered assembly.
type Result struct {
	// System is the rendered system prompt: non-empty sections joined by a blank line.
	System string
	// Sections are the rendered non-empty sections, in prompt order.
	Sections []SectionText
	// Tools are the wire tools in request order.
	Tools []llm.ToolSchema
	// RuntimeContext is the runtime-context snapshot; its Text is empty when no context is active.
	RuntimeContext Snapshot
}

// Assemble builds, runs the waterfall over, and renders the prompt for in. It returns an
// *AssemblyError on any failure (PRM-8). Every provider is evaluated on every call.
func (r *Registry) Assemble(ctx context.Context, in Input) (Result, error) {
	a, err := r.assemble(ctx, in)
	if err != nil {
		return Result{}, &AssemblyError{Err: err}
	}
	res, err := render(a)
	if err != nil {
		return Result{}, &AssemblyError{Err: err}
	}
	return res, nil
}

func (r *Registry) assemble(ctx context.Context, in Input) (Assembly, error) {
	m, err := in.mode()
	if err != nil {
		return Assembly{}, err
	}
	order := r.cfg.ToolOrder
	if in.ToolOrder != nil {
		if err := ValidateToolOrder(in.ToolOrder); err != nil {
			return Assembly{}, err
		}
		order = in.ToolOrder
	}
	v := r.view(in.Chain)
	a := Assembly{Variables: evalVariables(ctx, in, v.layers)}
	native, known, err := collectTools(ctx, in, v.layers, m != ModeNative)
	if err != nil {
		return Assembly{}, err
	}
	wire, known := present(m, in.CodeRuntime, native, known)
	if a.Tools, err = orderTools(wire, order, known); err != nil {
		return Assembly{}, err
	}
	var complete *SectionText
	if a.Sections, complete, err = evalSections(ctx, in, modeSections(m, in.CodeRuntime, native), v.layers); err != nil {
		return Assembly{}, err
	}
	if !v.suppressed {
		if a.Contexts, err = evalContexts(ctx, in, v.layers); err != nil {
			return Assembly{}, err
		}
	}
	if a, err = waterfall(ctx, v.listeners, a); err != nil {
		return Assembly{}, err
	}
	if complete != nil {
		a.Sections = []SectionText{*complete}
	}
	if v.suppressed {
		a.Contexts = nil
	}
	return a, nil
}

// view is the registrations one assembly uses, copied under the read lock.
type view struct {
	layers     []layer // global first, then the chain's existing layers farthest to nearest
	listeners  []AssembleListener
	suppressed bool
}

func (r *Registry) view(chain Chain) view {
	r.mu.RLock()
	defer r.mu.RUnlock()
	v := view{layers: []layer{*r.layers[Global]}, suppressed: !r.cfg.includeRuntimeContext()}
	for _, scope := range chain {
		if l, ok := r.layers[scope]; ok && scope != Global {
			v.layers = append(v.layers, *l)
		}
	}
	var listeners []entry[AssembleListener]
	for _, l := range v.layers {
		listeners = append(listeners, l.listeners...)
		v.suppressed = v.suppressed || len(l.suppressors) > 0
	}
	slices.SortFunc(listeners, func(a, b entry[AssembleListener]) int { return cmp.Compare(a.id, b.id) })
	for _, e := range listeners {
		v.listeners = append(v.listeners, e.v)
	}
	return v
}

// evalVariables evaluates every variable, farther layers first, so the nearest layer wins.
func evalVariables(ctx context.Context, in Input, layers []layer) map[string]Value {
	vars := map[string]Value{}
	for _, l := range layers {
		for _, e := range l.variables {
			text, ok := e.v(ctx, in)
			vars[e.name] = Value{Text: text, Absent: !ok}
		}
	}
	return vars
}

// collectTools runs the tool providers and returns the reduced native tools and the known names.
// With dropRunCode (a non-native mode) a provider's run_code is left out: the runtime's replaces it.
func collectTools(ctx context.Context, in Input, layers []layer, dropRunCode bool) ([]llm.ToolSchema, map[string]bool, error) {
	var tools []llm.ToolSchema
	known := map[string]bool{}
	seen := map[string]bool{}
	for _, l := range layers {
		for _, e := range l.tools {
			set, err := e.v(ctx, in)
			if err != nil {
				return nil, nil, fmt.Errorf("tool provider: %w", err)
			}
			for _, t := range set.Schemas {
				switch {
				case t.Name == ToolOrderRest:
					return nil, nil, fmt.Errorf("%w: a tool provider returned %q, which is reserved for toolOrder", ErrReservedToolName, clip(t.Name))
				case dropRunCode && t.Name == RunCodeTool:
					continue
				case seen[t.Name]:
					return nil, nil, fmt.Errorf("%w: %q is provided more than once", ErrDuplicateTool, clip(t.Name))
				}
				seen[t.Name] = true
				tools = append(tools, reduceTool(t))
			}
			names := set.KnownNames
			if names == nil {
				names = toolNames(set.Schemas)
			}
			for _, name := range names {
				if !dropRunCode || name != RunCodeTool {
					known[name] = true
				}
			}
		}
	}
	return tools, known, nil
}

// reduceTool keeps name, description and a copy of the parameters (PRM-4).
func reduceTool(t llm.ToolSchema) llm.ToolSchema {
	return llm.ToolSchema{Name: t.Name, Description: t.Description,
		Parameters: json.RawMessage(slices.Clone([]byte(t.Parameters)))}
}

func toolNames(tools []llm.ToolSchema) []string {
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Name
	}
	return names
}
