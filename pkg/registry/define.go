package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
)

// DefineSpec describes a tool whose arguments are the Go type Args and whose value is Out.
type DefineSpec[Args, Out any] struct {
	Name        string
	Description string
	// TimeoutMs bounds the body (E2); 0 uses the registry default.
	TimeoutMs int
	// OutputSchema overrides the output schema generated from Out; it must be in the SCH-1
	// subset.
	OutputSchema json.RawMessage
	// Render turns a call's arguments and value into content. nil renders a string value as
	// its text and anything else as JSON text.
	Render func(args Args, out Out) ([]llm.Block, error)
	// PresentationMeta computes the result's meta for top-level calls; optional.
	PresentationMeta func(args Args, out Out) (any, error)
	// ConcurrencySafe makes every call with valid arguments parallel; IsConcurrencySafe
	// decides per call instead. Neither means exclusive (REG-9).
	ConcurrencySafe   bool
	IsConcurrencySafe func(args Args) bool
	// FinalizeContent may replace the final content of every outcome (PIPE-17).
	FinalizeContent func(exec *Execution, res *Result) ([]llm.Block, error)
	// PresentCall labels a call for humans; it gets only valid arguments (SCH-11).
	PresentCall func(args Args) string
}

// BodyFunc is a Define'd tool body. It receives arguments that passed validation.
type BodyFunc[Args, Out any] func(ctx context.Context, exec *Execution, args Args) (Out, error)

// Define builds a tool from a Go argument type (SCH-3..SCH-9, SCH-11). The parameters schema is
// generated from Args with invopop/jsonschema (inline, no $ref) and must reduce to the SCH-1
// subset: the root is an open object, nested structs are closed, maps are open objects. The
// arguments are validated inside execute, after pre-execute, guards and wrappers; a violation
// fails with INVALID_ARGS and the body does not run.
func Define[Args, Out any](spec DefineSpec[Args, Out], body BodyFunc[Args, Out]) (*Tool, error) {
	if body == nil {
		return nil, fmt.Errorf("registry: define %q: body is required", spec.Name)
	}
	params, paramsJSON, err := reflectSchema[Args](true)
	if err != nil {
		return nil, fmt.Errorf("registry: define %q: parameters: %w", spec.Name, err)
	}
	outJSON := spec.OutputSchema
	if outJSON == nil {
		if _, outJSON, err = reflectSchema[Out](false); err != nil {
			return nil, fmt.Errorf("registry: define %q: output: %w", spec.Name, err)
		}
	}
	d := &defined[Args, Out]{spec: spec, params: params, body: body}
	t := &Tool{
		Name: spec.Name, Description: spec.Description, Parameters: paramsJSON,
		TimeoutMs: spec.TimeoutMs, FinalizeContent: spec.FinalizeContent,
		Output:  &Output{Schema: outJSON, Render: d.render},
		Execute: d.execute,
	}
	if spec.PresentationMeta != nil {
		t.Output.PresentationMeta = d.meta
	}
	if spec.ConcurrencySafe || spec.IsConcurrencySafe != nil {
		t.IsConcurrencySafe = d.safe
		t.Parallel = spec.ConcurrencySafe
	}
	if spec.PresentCall != nil {
		t.PresentCall = d.presentCall
	}
	return t, nil
}

type defined[Args, Out any] struct {
	spec   DefineSpec[Args, Out]
	params *Schema
	body   BodyFunc[Args, Out]
}

// parse validates raw against the parameters schema and decodes it (SCH-9).
func (d *defined[Args, Out]) parse(raw json.RawMessage) (Args, error) {
	var args Args
	v, err := decodeValue(raw)
	if err != nil {
		return args, argsError([]string{`"arguments" must be lossless JSON`})
	}
	if viol := d.params.validate(v, rootArguments, false); len(viol) > 0 {
		return args, argsError(viol)
	}
	if err := json.Unmarshal(raw, &args); err != nil {
		return args, argsError([]string{err.Error()})
	}
	return args, nil
}

func argsError(viol []string) error {
	return &Error{Name: NameToolArgs, Code: fault.CodeInvalidArgs, Message: "invalid arguments: " + strings.Join(viol, "; ")}
}

func (d *defined[Args, Out]) execute(ctx context.Context, exec *Execution) (json.RawMessage, error) {
	args, err := d.parse(exec.Args)
	if err != nil {
		return nil, err
	}
	out, err := d.body(ctx, exec, args)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, NewError(NameToolOutput, fault.CodeInvalidToolOutput, "tool %q returned invalid output: %v", d.spec.Name, err)
	}
	return b, nil
}

func (d *defined[Args, Out]) decodeBoth(args, value json.RawMessage) (Args, Out, error) {
	var a Args
	var o Out
	if err := json.Unmarshal(args, &a); err != nil {
		return a, o, err
	}
	err := json.Unmarshal(value, &o)
	return a, o, err
}

func (d *defined[Args, Out]) render(args, value json.RawMessage) ([]llm.Block, error) {
	if d.spec.Render == nil {
		return renderDefault(value), nil
	}
	a, o, err := d.decodeBoth(args, value)
	if err != nil {
		return nil, err
	}
	return d.spec.Render(a, o)
}

// renderDefault renders a string value as its text and anything else as compact JSON text.
func renderDefault(value json.RawMessage) []llm.Block {
	if len(value) >= 2 && value[0] == '"' {
		if inner := value[1 : len(value)-1]; !bytes.ContainsAny(inner, "\\\"") {
			return []llm.Block{llm.TextBlock(string(inner))}
		}
		var s string
		if json.Unmarshal(value, &s) == nil {
			return []llm.Block{llm.TextBlock(s)}
		}
	}
	return []llm.Block{llm.TextBlock(string(value))}
}

func (d *defined[Args, Out]) meta(args, value json.RawMessage) (json.RawMessage, error) {
	a, o, err := d.decodeBoth(args, value)
	if err != nil {
		return nil, err
	}
	m, err := d.spec.PresentationMeta(a, o)
	if err != nil || m == nil {
		return nil, err
	}
	return json.Marshal(m)
}

// safe is the REG-9 classifier: false for invalid arguments (SCH-11).
func (d *defined[Args, Out]) safe(raw json.RawMessage) bool {
	args, err := d.parse(raw)
	if err != nil {
		return false
	}
	if d.spec.IsConcurrencySafe != nil {
		return d.spec.IsConcurrencySafe(args)
	}
	return d.spec.ConcurrencySafe
}

// presentCall is soft (SCH-11): invalid arguments or a panic give "".
func (d *defined[Args, Out]) presentCall(raw json.RawMessage) (s string) {
	defer func() {
		if recover() != nil {
			s = ""
		}
	}()
	args, err := d.parse(raw)
	if err != nil {
		return ""
	}
	return d.spec.PresentCall(args)
}

// reflectSchema generates T's schema with invopop/jsonschema, reduces it to the SCH-1 subset
// and compiles it. params makes the root an open object (SCH-3).
func reflectSchema[T any](params bool) (*Schema, json.RawMessage, error) {
	rf := &jsonschema.Reflector{DoNotReference: true, ExpandedStruct: true}
	raw, err := json.Marshal(rf.Reflect(new(T)))
	if err != nil {
		return nil, nil, err
	}
	v, err := decodeValue(raw)
	if err != nil {
		return nil, nil, err
	}
	root, ok := v.(*object)
	if !ok {
		root = &object{vals: map[string]any{}}
	}
	root.del("$schema")
	root.del("$id")
	reduce(root)
	if params {
		root.del("additionalProperties")
		if _, has := root.vals["type"]; !has {
			root.set("type", "object")
		}
	}
	out := json.RawMessage(encodeValue(root))
	s, err := CompileSchema(out)
	if err != nil {
		return nil, nil, err
	}
	return s, out, nil
}

// reduce rewrites invopop's output into the subset: `true` sub-schemas become {}, and objects
// without properties or additionalProperties (maps) become explicitly open.
func reduce(o *object) {
	if props, ok := o.vals["properties"].(*object); ok {
		for _, k := range props.keys {
			props.vals[k] = reduceNode(props.vals[k])
		}
	}
	if it, ok := o.vals["items"]; ok {
		o.vals["items"] = reduceNode(it)
	}
	if arr, ok := o.vals["oneOf"].([]any); ok {
		for i := range arr {
			arr[i] = reduceNode(arr[i])
		}
	}
	if o.vals["type"] == "object" {
		if _, has := o.vals["additionalProperties"]; !has {
			o.set("additionalProperties", true)
		}
		if ap, ok := o.vals["additionalProperties"].(*object); ok && len(ap.keys) == 0 {
			o.vals["additionalProperties"] = true
		}
	}
}

func reduceNode(v any) any {
	if b, ok := v.(bool); ok && b {
		return &object{vals: map[string]any{}}
	}
	if o, ok := v.(*object); ok {
		reduce(o)
	}
	return v
}

func (o *object) del(k string) {
	if _, ok := o.vals[k]; !ok {
		return
	}
	delete(o.vals, k)
	for i, x := range o.keys {
		if x == k {
			o.keys = append(o.keys[:i], o.keys[i+1:]...)
			break
		}
	}
}

func (o *object) set(k string, v any) {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}
