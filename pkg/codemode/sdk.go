package codemode

import (
	"encoding/json"
	"sort"

	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
)

// SDKInstructions is the fixed block that precedes the SDK declarations (CODE-3).
const SDKInstructions = "## Programs for run_code\n\n" +
	"`run_code` runs a TypeScript program. Its `code` is the body of an async function, so `await` and `return` " +
	"work at the top level; types are erased before it runs and are not checked. Its `description` says in a few " +
	"words what the program does. Inside a program:\n\n" +
	"- Call a tool as `await tools.name(args)`, or `await tools[\"a-name\"](args)` when the name is not an " +
	"identifier. The call resolves to the tool's JSON value, typed by `ToolOutputMap` below. Arguments must be " +
	"plain JSON: no `undefined`, `NaN`, `-0`, BigInt, cycles, sparse arrays or class instances.\n" +
	"- A call that fails rejects with a `ToolCallError`: its `toolName` is the tool and its `message` says what " +
	"went wrong. Catch it to recover and carry on.\n" +
	"- Calls that are safe to overlap run at the same time when you start them together (for example with " +
	"`Promise.all`); the others run one at a time, in the order they were made. Use `await` to order work that " +
	"depends on earlier results.\n" +
	"- Only what the program prints with `console.log` and the value it returns come back to you; tool results " +
	"you neither print nor return stay inside the program, so pick out what you need. An image a tool returns " +
	"is attached for your next step.\n" +
	"- There is no file system, network, timer, `require`, `import` or `process`: the program reaches the " +
	"outside only through `tools`.\n"

// OutputSchemaFunc returns the raw output schema of a tool, nil when it has none.
type OutputSchemaFunc func(name string) json.RawMessage

// RenderSDK renders the tools:sdk section (CODE-3): SDKInstructions, then TypeScript
// declarations of tools (without run_code) in code-unit order of their names: the JsonValue
// alias, ToolArgsMap from the parameters, ToolOutputMap from the output schemas (outputs may be
// nil: every output is then JsonValue), ToolName, ToolCallError and the `tools` constant. It
// never fails and is byte-identical for an unchanged tool set.
func RenderSDK(tools []llm.ToolSchema, outputs OutputSchemaFunc) string {
	ts := make([]llm.ToolSchema, 0, len(tools))
	for _, t := range tools {
		if t.Name != registry.RunCodeName {
			ts = append(ts, t)
		}
	}
	sort.SliceStable(ts, func(i, j int) bool { return codeUnitLess(ts[i].Name, ts[j].Name) })
	var w tsWriter
	w.buf.WriteString(SDKInstructions)
	w.buf.WriteString("\n```ts\n")
	w.line(0, "type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };")
	w.line(0, "")
	w.interfaceOf("ToolArgsMap", ts, func(t llm.ToolSchema) (any, bool) {
		if len(t.Parameters) == 0 {
			return &jobject{vals: map[string]any{"type": "object"}, keys: []string{"type"}}, true
		}
		return decodeOrdered(t.Parameters)
	}, true)
	w.line(0, "")
	w.interfaceOf("ToolOutputMap", ts, func(t llm.ToolSchema) (any, bool) {
		var raw json.RawMessage
		if outputs != nil {
			raw = outputs(t.Name)
		}
		if len(raw) == 0 {
			return true, true
		}
		return decodeOrdered(raw)
	}, false)
	w.line(0, "")
	w.line(0, "type ToolName = keyof ToolOutputMap;")
	w.line(0, "")
	w.line(0, "declare class ToolCallError extends Error {")
	w.line(1, `readonly name: "ToolCallError";`)
	w.line(1, "readonly toolName: ToolName;")
	w.line(0, "}")
	w.line(0, "")
	w.line(0, "declare const tools: {")
	w.line(1, "readonly [K in ToolName]: (args: ToolArgsMap[K]) => Promise<ToolOutputMap[K]>;")
	w.line(0, "};")
	w.buf.WriteString("```")
	return w.buf.String()
}

// interfaceOf writes one map interface with a member per tool.
func (w *tsWriter) interfaceOf(name string, ts []llm.ToolSchema, schema func(llm.ToolSchema) (any, bool), docs bool) {
	if len(ts) == 0 {
		w.line(0, "interface "+name+" {}")
		return
	}
	w.line(0, "interface "+name+" {")
	for _, t := range ts {
		if docs {
			w.docComment(t.Description, 1)
		}
		typ := "unknown"
		if s, ok := schema(t); ok {
			typ = w.typeOf(s, 1, 0)
		}
		w.line(1, propName(t.Name)+": "+typ+";")
	}
	w.line(0, "}")
}

// codeUnitLess orders names by UTF-16 code units, as JavaScript sorts strings (CODE-3).
func codeUnitLess(a, b string) bool {
	ua, ub := utf16Units(a), utf16Units(b)
	for i := 0; i < len(ua) && i < len(ub); i++ {
		if ua[i] != ub[i] {
			return ua[i] < ub[i]
		}
	}
	return len(ua) < len(ub)
}

func utf16Units(s string) []uint16 {
	out := make([]uint16, 0, len(s))
	for _, r := range s {
		if r >= 0x10000 {
			r -= 0x10000
			out = append(out, uint16(0xD800+(r>>10)), uint16(0xDC00+(r&0x3FF)))
			continue
		}
		out = append(out, uint16(r))
	}
	return out
}
