package promptasm

import (
	"context"
	"sync"

	"github.com/dshd/dshd/pkg/llm"
)

// Global is the scope key of the global layer.
const Global = ""

// Chain is the scope chain of one assembly, farthest scope first and nearest last, for example
// {presetScope, sessionScope}. The global layer is implied and never listed.
type Chain []string

// Section is one contribution to the system prompt (PRM-2).
type Section struct {
	// Name identifies the section; unique per layer. A scoped section shadows a farther one of
	// the same name.
	Name string
	// Order sorts sections ascending; ties keep registration order. It must be finite. By
	// convention -100 is the identity, 0 the persona, 100 to 199 tool guidance.
	Order float64
	// Text is the section's text, used when TextFunc is nil. It may reference {{variables}}.
	Text string
	// TextFunc, when set, computes the text on every assembly. An error fails the assembly.
	TextFunc func(ctx context.Context, in Input) (string, error)
	// Complete makes this section the whole system prompt once the waterfall has run (PRM-6).
	Complete bool
}

// ContextEntry is one runtime-context contribution (PRM-9): rendered into the snapshot user
// message, never into the system prompt. Name, Order, Text and TextFunc work as in Section.
type ContextEntry struct {
	Name     string
	Order    float64
	Text     string
	TextFunc func(ctx context.Context, in Input) (string, error)
}

// VariableFunc computes a variable's value for one assembly. ok=false means the variable has no
// value in this assembly; a section that references it then fails to render (PRM-3, PRM-7).
type VariableFunc func(ctx context.Context, in Input) (value string, ok bool)

// ToolSet is what a tool provider contributes to one assembly (PRM-4).
type ToolSet struct {
	// Schemas are the visible tools. Each is reduced to name, description and a copy of its
	// parameters.
	Schemas []llm.ToolSchema
	// KnownNames are the names toolOrder may list: the pre-restriction set. Nil means the
	// names of Schemas.
	KnownNames []string
}

// ToolProviderFunc returns a provider's tools for one assembly. An error fails the assembly.
type ToolProviderFunc func(ctx context.Context, in Input) (ToolSet, error)

// Next continues an assemble waterfall with the rest of the listeners.
type Next func(ctx context.Context, a Assembly) (Assembly, error)

// AssembleListener is one stage of the assemble waterfall (PRM-6). It receives the assembly
// (sections and contexts not yet interpolated, tools ordered) and returns the one to use, usually
// by calling next with a possibly modified assembly. Not calling next skips the listeners after
// it. The first registered listener is outermost. An error fails the assembly.
type AssembleListener func(ctx context.Context, a Assembly, next Next) (Assembly, error)

// Registry holds prompt registrations and assembles prompts from them. It is safe for concurrent
// use. Providers (TextFunc, VariableFunc, ToolProviderFunc, listeners) are called without any
// Registry lock held, so they may call the Registry.
type Registry struct {
	cfg Config

	mu      sync.RWMutex
	nextID  uint64
	layers  map[string]*layer // Global always present; scoped layers dropped when empty
	changes entries[func() error]
}

// New returns a Registry with the built-in registrations of PRM-1 and PRM-10: the identity
// section (unless disabled), the persona section and the provider, model and cwd variables, all
// in the global layer. It fails when cfg.ToolOrder is invalid.
func New(cfg Config) (*Registry, error) {
	if cfg.ToolOrder != nil {
		if err := ValidateToolOrder(cfg.ToolOrder); err != nil {
			return nil, err
		}
		cfg.ToolOrder = append([]string(nil), cfg.ToolOrder...)
	}
	r := &Registry{cfg: cfg, layers: map[string]*layer{Global: {}}}
	g := r.layers[Global]
	if cfg.includeIdentity() {
		g.sections = g.sections.add(entryOf(r, SectionIdentity, Section{
			Name: SectionIdentity, Order: OrderIdentity, Text: IdentityText}))
	}
	g.sections = g.sections.add(entryOf(r, SectionPersona, Section{
		Name: SectionPersona, Order: OrderPersona, Text: cfg.Persona}))
	builtins := []struct {
		name  string
		field func(Input) string
	}{
		{VarProvider, func(in Input) string { return in.Provider }},
		{VarModel, func(in Input) string { return in.Model }},
		{VarCWD, func(in Input) string { return in.CWD }},
	}
	for _, b := range builtins {
		g.variables = g.variables.add(entryOf(r, b.name, VariableFunc(
			func(_ context.Context, in Input) (string, bool) { v := b.field(in); return v, v != "" })))
	}
	return r, nil
}

// entryOf allocates an id for a new entry; the caller holds r.mu or owns r exclusively.
func entryOf[T any](r *Registry, name string, v T) entry[T] {
	r.nextID++
	return entry[T]{id: r.nextID, name: name, v: v}
}
