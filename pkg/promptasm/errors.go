package promptasm

import "errors"

// Registration errors, returned by the Registry's registration methods.
var (
	// ErrDuplicate: a section, context entry or variable of the same name exists in the layer.
	ErrDuplicate = errors.New("already registered in this layer")
	// ErrInvalidOrder: an order that is NaN or infinite.
	ErrInvalidOrder = errors.New("order must be a finite number")
	// ErrInvalidName: an empty section or context name, or a variable name that does not match
	// [a-z][a-z0-9_]*.
	ErrInvalidName = errors.New("invalid name")
	// ErrInvalidToolOrder: a toolOrder without exactly one ToolOrderRest marker, or with a
	// duplicate. Also wrapped in an *AssemblyError when Input.ToolOrder is invalid.
	ErrInvalidToolOrder = errors.New("invalid toolOrder")
)

// Assembly errors, always wrapped in an *AssemblyError by Assemble.
var (
	ErrMalformedReference = errors.New("malformed prompt variable reference")
	ErrUnknownVariable    = errors.New("unknown prompt variable")
	ErrNoValue            = errors.New("prompt variable has no value")
	ErrMultipleComplete   = errors.New("more than one complete prompt section")
	ErrReservedToolName   = errors.New("reserved tool name")
	ErrDuplicateTool      = errors.New("duplicate tool name")
	ErrUnknownTool        = errors.New("toolOrder lists an unknown tool")
	ErrInvalidMode        = errors.New("invalid presentation mode")
	// ErrCodeRuntime: a code or both assembly without a usable code runtime (PRS-4).
	ErrCodeRuntime = errors.New("code runtime unavailable")
)

// AssemblyError is the one error type Assemble returns (PRM-8): the prompt could not be built,
// so the step must not start and no model request may be made. Err says why; errors.Is matches
// the sentinels above through it.
type AssemblyError struct {
	Err error
}

func (e *AssemblyError) Error() string { return "assemble system prompt: " + e.Err.Error() }

func (e *AssemblyError) Unwrap() error { return e.Err }
