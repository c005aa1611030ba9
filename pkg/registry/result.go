package registry

import (
	"encoding/json"
	"github.com/dshd/dshd/pkg/eventlog"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
)

// ToolError is the failure of a result (RES-2). Info is nil for failures without a code (a plain
// thrown error, a post-execute block).
type ToolError struct {
	Message string      `json:"message"`
	Info    *fault.Info `json:"info,omitempty"`
}

// FileMutation records a committed file change (RES-6): the log's vocabulary.
type FileMutation = eventlog.FileMutation

// Result is the outcome of one tool execution (RES-1, RES-2). A Result returned by the pipeline is
// final and must not be modified by anyone: it is shared between the caller, `tools/result`
// observers and the log writer.
//
// Success: IsError false, Value set (lossless JSON), Content rendered, ConcludesTurn optional.
// Failure: IsError true, Error set, Content is `Error: <message>` unless a post-execute block or
// finalizeContent replaced it; never Value or ConcludesTurn.
type Result struct {
	IsError            bool
	Value              json.RawMessage
	Content            []llm.Block
	Meta               json.RawMessage
	Error              *ToolError
	AdditionalContexts []llm.Message
	Mutations          []FileMutation
	ConcludesTurn      bool
}

// fault.Info returns the result's error info, or nil.
func (r *Result) ErrorInfo() *fault.Info {
	if r == nil || r.Error == nil {
		return nil
	}
	return r.Error.Info
}

// Location is where in a session a call was made.
type Location struct {
	Turn int `json:"turn"`
	Step int `json:"step"`
}

// Mode is a call's execution mode for the schedulers (REG-9).
type Mode int

const (
	// Exclusive calls run alone and act as barriers.
	Exclusive Mode = iota
	// Parallel calls may overlap with neighbouring parallel calls.
	Parallel
)

func (m Mode) String() string {
	if m == Parallel {
		return "parallel"
	}
	return "exclusive"
}

// PrepKind says what the scheduler does with a prepared call.
type PrepKind int

const (
	// PrepDispatch: the call is allowed; run Dispatch (concurrently if parallel), then Finalize.
	PrepDispatch PrepKind = iota
	// PrepPostResult: the call already has a result (a deny, ABORTED_BEFORE_DISPATCH after
	// allow) that still goes through post-execute; run Finish.
	PrepPostResult
	// PrepFinalResult: the call already has a final result (a throwing policy, bad arguments,
	// a collapsed call) that skips post-execute; run Finish.
	PrepFinalResult
	// PrepPark: the call waits outside the server (its ask is committed); it has no result
	// and is not dispatched: the turn parks and a resumed loop instance prepares it again.
	PrepPark
)

func (k PrepKind) String() string {
	switch k {
	case PrepDispatch:
		return "dispatch"
	case PrepPostResult:
		return "post-result"
	case PrepPark:
		return "park"
	default:
		return "final-result"
	}
}
