package promptasm

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
)

// evalSections merges the sections (base first, then the layers; a nearer name shadows a farther
// one in its position), sorts them stably by order and evaluates their text. It returns a copy
// of the complete section, if one is in effect, and fails when more than one is.
func evalSections(ctx context.Context, in Input, base []Section, layers []layer) ([]SectionText, *SectionText, error) {
	lists := make([]entries[Section], 0, len(layers)+1)
	lists = append(lists, baseEntries(base))
	for _, l := range layers {
		lists = append(lists, l.sections)
	}
	merged := mergeNamed(lists...)
	slices.SortStableFunc(merged, func(a, b entry[Section]) int { return cmp.Compare(a.v.Order, b.v.Order) })
	var completes []string
	for _, e := range merged {
		if e.v.Complete {
			completes = append(completes, e.name)
		}
	}
	if len(completes) > 1 {
		return nil, nil, fmt.Errorf("%w: %s", ErrMultipleComplete, nameList(completes, strconv.Quote))
	}
	out := make([]SectionText, 0, len(merged))
	var complete *SectionText
	for _, e := range merged {
		text, err := evalText(ctx, in, e.v.Text, e.v.TextFunc)
		if err != nil {
			return nil, nil, fmt.Errorf("prompt section %q: %w", clip(e.name), err)
		}
		st := SectionText{Name: e.name, Order: e.v.Order, Text: text}
		if e.v.Complete {
			complete = &st
		}
		out = append(out, st)
	}
	return out, complete, nil
}

// evalContexts merges, sorts and evaluates the runtime-context entries like evalSections.
func evalContexts(ctx context.Context, in Input, layers []layer) ([]SectionText, error) {
	lists := make([]entries[ContextEntry], 0, len(layers))
	for _, l := range layers {
		lists = append(lists, l.contexts)
	}
	merged := mergeNamed(lists...)
	slices.SortStableFunc(merged, func(a, b entry[ContextEntry]) int { return cmp.Compare(a.v.Order, b.v.Order) })
	out := make([]SectionText, 0, len(merged))
	for _, e := range merged {
		text, err := evalText(ctx, in, e.v.Text, e.v.TextFunc)
		if err != nil {
			return nil, fmt.Errorf("prompt context %q: %w", clip(e.name), err)
		}
		out = append(out, SectionText{Name: e.name, Order: e.v.Order, Text: text})
	}
	return out, nil
}

func evalText(ctx context.Context, in Input, text string, fn func(context.Context, Input) (string, error)) (string, error) {
	if fn == nil {
		return text, nil
	}
	return fn(ctx, in)
}

// baseEntries wraps the built-in mode sections as the lowest-precedence layer.
func baseEntries(base []Section) entries[Section] {
	es := make(entries[Section], len(base))
	for i, s := range base {
		es[i] = entry[Section]{name: s.Name, v: s}
	}
	return es
}

// waterfall runs the assemble listeners, first outermost; the innermost next returns its input.
func waterfall(ctx context.Context, listeners []AssembleListener, a Assembly) (Assembly, error) {
	var call func(i int) Next
	call = func(i int) Next {
		return func(ctx context.Context, a Assembly) (Assembly, error) {
			if i == len(listeners) {
				return a, nil
			}
			return listeners[i](ctx, a, call(i+1))
		}
	}
	out, err := call(0)(ctx, a)
	if err != nil {
		return Assembly{}, fmt.Errorf("assemble listener: %w", err)
	}
	return out, nil
}
