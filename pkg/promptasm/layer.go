package promptasm

import "slices"

// entry is one registration in a layer. Ids are unique across the Registry, so removal by id
// needs no knowledge of which list holds the entry.
type entry[T any] struct {
	id   uint64
	name string
	v    T
}

// entries is an ordered list of registrations. Lists are never mutated in place: add and remove
// build new slices, so a slice copied under the read lock stays valid after it is released.
type entries[T any] []entry[T]

func (es entries[T]) has(name string) bool {
	return slices.ContainsFunc(es, func(e entry[T]) bool { return e.name == name })
}

func (es entries[T]) add(e entry[T]) entries[T] {
	return append(slices.Clip(es), e)
}

func (es entries[T]) remove(id uint64) entries[T] {
	i := slices.IndexFunc(es, func(e entry[T]) bool { return e.id == id })
	if i < 0 {
		return es
	}
	return slices.Concat(es[:i], es[i+1:])
}

// removeRange returns the list without the entries whose ids are in [lo, hi], in one pass.
func (es entries[T]) removeRange(lo, hi uint64) entries[T] {
	out := make(entries[T], 0, len(es))
	for _, e := range es {
		if e.id < lo || e.id > hi {
			out = append(out, e)
		}
	}
	return out
}

// layer holds the registrations of the global layer or of one scope key.
type layer struct {
	sections    entries[Section]
	contexts    entries[ContextEntry]
	variables   entries[VariableFunc]
	tools       entries[ToolProviderFunc]
	suppressors entries[struct{}]
	listeners   entries[AssembleListener]
}

func (l *layer) remove(id uint64) {
	l.sections = l.sections.remove(id)
	l.contexts = l.contexts.remove(id)
	l.variables = l.variables.remove(id)
	l.tools = l.tools.remove(id)
	l.suppressors = l.suppressors.remove(id)
	l.listeners = l.listeners.remove(id)
}

func (l *layer) empty() bool {
	return len(l.sections)+len(l.contexts)+len(l.variables)+len(l.tools)+
		len(l.suppressors)+len(l.listeners) == 0
}

// mergeNamed merges named entries of several layers, listed from lowest to highest precedence: a
// later layer's entry replaces an earlier one of the same name in the earlier one's position,
// and new names are appended in registration order.
func mergeNamed[T any](lists ...entries[T]) []entry[T] {
	var out []entry[T]
	pos := map[string]int{}
	for _, es := range lists {
		for _, e := range es {
			if i, ok := pos[e.name]; ok {
				out[i] = e
				continue
			}
			pos[e.name] = len(out)
			out = append(out, e)
		}
	}
	return out
}
