package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/dshd/dshd/pkg/llm"
)

// RunCodeName is the reserved code-mode tool (REG-2, REG-5).
const RunCodeName = "run_code"

// Tool is a raw tool definition (SCH-10). The registry copies it at registration; later changes
// to the caller's value have no effect.
type Tool struct {
	Name        string
	Description string
	// Parameters is the raw JSON Schema of the arguments. The registry does not validate it
	// (REG-3); it must be lossless JSON when schemas are projected.
	Parameters json.RawMessage
	// Output is required (REG-2).
	Output *Output
	// TimeoutMs bounds the body (E2); 0 means the registry's default; negative is rejected.
	TimeoutMs int
	// Execute runs the body. It must honour ctx. The returned value becomes owned by the
	// registry: the tool must not modify it afterwards. A non-nil error is a failure (PIPE-10).
	Execute func(ctx context.Context, exec *Execution) (json.RawMessage, error)
	// IsConcurrencySafe classifies a call (REG-9); nil means exclusive. A panic means exclusive.
	IsConcurrencySafe func(args json.RawMessage) bool
	// Parallel advertises the tool as parallel-safe in the catalogue (`GET /v1/tools`); the
	// scheduler still asks IsConcurrencySafe per call.
	Parallel bool
	// FinalizeContent may replace the content of every outcome (PIPE-17): a nil slice keeps it.
	FinalizeContent func(exec *Execution, res *Result) ([]llm.Block, error)
	// PresentCall gives a short human label of a call, or "" (soft; never fails, SCH-11).
	PresentCall func(args json.RawMessage) string
	// Client marks a client-executed tool (ClientTool): a parkable turn parks its calls
	// instead of running Execute, which only fails.
	Client bool
}

// Output is the output contract of a tool (REG-2, SCH-12, PIPE-12).
type Output struct {
	// Schema is the raw JSON Schema every successful value must satisfy; nil accepts any
	// lossless JSON value. It must be in the SCH-1 subset.
	Schema json.RawMessage
	// Render turns the arguments and the canonical value into content. Required.
	Render func(args, value json.RawMessage) ([]llm.Block, error)
	// PresentationMeta computes the result's meta for top-level calls; optional.
	PresentationMeta func(args, value json.RawMessage) (json.RawMessage, error)
}

// entry is a registered tool: the copied definition (its parameters copied too) plus its
// compiled output schema, and whether the parameters are lossless JSON (REG-3: a projection
// fails when they are not; registration does not).
type entry struct {
	Tool
	out            *Schema
	paramsLossless bool
}

// checkTool applies the REG-2 rules that do not depend on the layer and compiles the output
// schema.
func checkTool(t *Tool, reserved bool) (*entry, error) {
	if t == nil {
		return nil, fmt.Errorf("registry: tool definition is nil")
	}
	if t.Name == "" {
		return nil, fmt.Errorf("registry: tool name must be non-empty")
	}
	if t.Name == RunCodeName && !reserved {
		return nil, fmt.Errorf("registry: tool name %q is reserved", RunCodeName)
	}
	if t.Output == nil {
		return nil, fmt.Errorf("registry: tool %q: output is required", t.Name)
	}
	if t.Output.Render == nil {
		return nil, fmt.Errorf("registry: tool %q: output.render must be a function", t.Name)
	}
	if t.TimeoutMs < 0 {
		return nil, fmt.Errorf("registry: tool %q: timeoutMs must be a finite number greater than 0", t.Name)
	}
	if t.Execute == nil {
		return nil, fmt.Errorf("registry: tool %q: execute is required", t.Name)
	}
	e := &entry{Tool: *t}
	if t.Parameters != nil {
		e.Parameters = bytes.Clone(t.Parameters)
	}
	e.paramsLossless = e.Parameters == nil || lossless(e.Parameters)
	o := *t.Output
	e.Output = &o
	if o.Schema != nil {
		s, err := CompileSchema(o.Schema)
		if err != nil {
			return nil, fmt.Errorf("registry: tool %q: output.schema: %w", t.Name, err)
		}
		e.out = s
	}
	return e, nil
}

// schema is Tool.Schema with the lossless check made once, at registration: an entry's
// parameters never change.
func (e *entry) schema() (llm.ToolSchema, error) {
	if !e.paramsLossless {
		return llm.ToolSchema{}, fmt.Errorf("registry: tool %q: parameters are not lossless JSON", e.Name)
	}
	params := e.Parameters
	if params == nil {
		params = json.RawMessage(`{"type":"object"}`)
	}
	return llm.ToolSchema{Name: e.Name, Description: e.Description, Parameters: append(json.RawMessage(nil), params...)}, nil
}

// Schema returns the wire schema of the tool: name, description and a deep copy of its
// parameters (REG-4). Parameters that are not lossless JSON are an error (REG-3).
func (t *Tool) Schema() (llm.ToolSchema, error) {
	params := t.Parameters
	if params == nil {
		params = json.RawMessage(`{"type":"object"}`)
	}
	if !lossless(params) {
		return llm.ToolSchema{}, fmt.Errorf("registry: tool %q: parameters are not lossless JSON", t.Name)
	}
	return llm.ToolSchema{Name: t.Name, Description: t.Description, Parameters: append(json.RawMessage(nil), params...)}, nil
}
