package registry

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
)

// Error names of the codes in result.go (docs/rules.md, extensions E1 and E2).
const (
	NameToolNotFound      = "ToolNotFoundError"
	NameToolArgs          = "ToolArgsError"
	NameToolOutput        = "ToolOutputError"
	NameJSONSchema        = "JsonSchemaError"
	NameAbort             = "AbortError"
	NameToolTimeout       = "ToolTimeoutError"
	NameToolDenied        = "ToolDeniedError"
	NameApprovalRejected  = "ApprovalRejectedError"
	NameApprovalCancelled = "ApprovalCancelledError"
)

// Coded is implemented by errors that carry a machine code (the HarnessError of docs/rules.md). A tool
// body, policy listener or approver returning a Coded error gives a result with error.info.
type Coded interface {
	error
	ErrorInfo() fault.Info
}

// Error is the registry's coded error. It implements Coded.
type Error struct {
	Name    string
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

// fault.Info implements Coded.
func (e *Error) ErrorInfo() fault.Info { return fault.Info{Name: e.Name, Code: e.Code} }

// NewError returns a coded error with a formatted message.
func NewError(name, code, format string, args ...any) *Error {
	return &Error{Name: name, Code: code, Message: fmt.Sprintf(format, args...)}
}

// SchemaError is an UNSUPPORTED_SCHEMA rejection listing every violation (SCH-1).
type SchemaError struct {
	Violations []string
}

func (e *SchemaError) Error() string {
	return "unsupported schema: " + strings.Join(e.Violations, "; ")
}

// fault.Info implements Coded.
func (e *SchemaError) ErrorInfo() fault.Info {
	return fault.Info{Name: NameJSONSchema, Code: fault.CodeUnsupportedSchema}
}

// Messages with a fixed template (docs/rules.md).
const (
	msgArgsNotLossless = "tool execution arguments must be losslessly JSON-serializable"
	msgAborted         = "tool call aborted"
	msgAbortedBefore   = "tool call aborted before dispatch"
	msgBlockedDefault  = "tool result blocked by post-execute policy"
)

// failure builds a failure result: content `Error: <message>` (RES-3).
func failure(message string, info *fault.Info) *Result {
	return &Result{
		IsError: true,
		Error:   &ToolError{Message: message, Info: info},
		Content: []llm.Block{llm.TextBlock("Error: " + message)},
	}
}

// failureOf builds the failure for a thrown error (PIPE-6, PIPE-10): info only for Coded errors.
func failureOf(err error) *Result {
	var c Coded
	if errors.As(err, &c) {
		info := c.ErrorInfo()
		return failure(errMessage(err), &info)
	}
	return failure(errMessage(err), nil)
}

func errMessage(err error) string {
	if err == nil {
		return "<unprintable thrown value>"
	}
	return err.Error()
}

func coded(name, code, message string) *Result {
	return failure(message, &fault.Info{Name: name, Code: code})
}

// AbortedBeforeDispatchResult is the synthetic SCHED-6 result: `Error: tool call aborted before
// dispatch` with {AbortError, ABORTED_BEFORE_DISPATCH}. Each call returns a fresh value.
func AbortedBeforeDispatchResult() *Result {
	return coded(NameAbort, fault.CodeAbortedBeforeDispatch, msgAbortedBefore)
}

func abortedResult() *Result { return coded(NameAbort, fault.CodeAborted, msgAborted) }

func unknownToolResult(name string) *Result {
	return coded(NameToolNotFound, fault.CodeUnknownTool, fmt.Sprintf("unknown tool %q", name))
}

func collapsedResult(name string) *Result {
	return coded(NameToolNotFound, fault.CodeUnknownTool, fmt.Sprintf(
		"unknown tool %q: only `run_code` is callable directly — call `%s` from inside a `run_code` program instead", name, name))
}

func invalidOutput(tool string, detail string) *Result {
	return coded(NameToolOutput, fault.CodeInvalidToolOutput, fmt.Sprintf("tool %q returned invalid output: %s", tool, detail))
}

func timeoutResult(ms int) *Result {
	return coded(NameToolTimeout, fault.CodeToolTimeout, fmt.Sprintf("tool call timed out after %dms", ms))
}
