package promptasm

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dshd/dshd/pkg/llm"
)

// ToolOrderRest is the toolOrder marker where unlisted tools are inserted in name order. No tool
// may be named like it.
const ToolOrderRest = "<unlisted-tools>"

// ValidateToolOrder checks a toolOrder list at load time (PRM-5): ToolOrderRest exactly once and
// no name twice. Names are checked against the registered tools only at assembly. The error wraps
// ErrInvalidToolOrder.
func ValidateToolOrder(order []string) error {
	seen := make(map[string]bool, len(order))
	for _, name := range order {
		if seen[name] {
			return fmt.Errorf("%w: %q is listed more than once", ErrInvalidToolOrder, clip(name))
		}
		seen[name] = true
	}
	if !seen[ToolOrderRest] {
		return fmt.Errorf("%w: it must contain the %q entry where unlisted tools go", ErrInvalidToolOrder, ToolOrderRest)
	}
	return nil
}

// sortTools sorts tools by name in byte order, which is stable across machines and locales.
func sortTools(tools []llm.ToolSchema) {
	slices.SortStableFunc(tools, func(a, b llm.ToolSchema) int { return strings.Compare(a.Name, b.Name) })
}

// orderTools applies a validated toolOrder (nil: name order). A listed name outside known
// rejects; a known name with no visible tool (restricted in this scope) is skipped.
func orderTools(tools []llm.ToolSchema, order []string, known map[string]bool) ([]llm.ToolSchema, error) {
	if order == nil {
		sortTools(tools)
		return tools, nil
	}
	var unknown []string
	for _, name := range order {
		if name != ToolOrderRest && !known[name] {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("%w: %s; known tools: %s", ErrUnknownTool, nameList(unknown, strconv.Quote), knownList(known))
	}
	listed := make(map[string]bool, len(order))
	for _, name := range order {
		listed[name] = true
	}
	var rest []llm.ToolSchema
	byName := make(map[string]llm.ToolSchema, len(tools))
	for _, t := range tools {
		byName[t.Name] = t
		if !listed[t.Name] {
			rest = append(rest, t)
		}
	}
	sortTools(rest)
	out := make([]llm.ToolSchema, 0, len(tools))
	for _, name := range order {
		if name == ToolOrderRest {
			out = append(out, rest...)
		} else if t, ok := byName[name]; ok {
			out = append(out, t)
		}
	}
	return out, nil
}

func knownList(known map[string]bool) string {
	if len(known) == 0 {
		return "(none)"
	}
	names := make([]string, 0, len(known))
	for name := range known {
		names = append(names, name)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
