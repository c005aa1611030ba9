package scheduler

import (
	"context"

	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
)

// Call is one tool call of an assistant message, as the model produced it.
type Call struct {
	// ID is the model's call id (callId).
	ID string
	// Name is the tool name the model asked for.
	Name string
	// Arguments is the raw JSON string the model produced; it is logged as is on `tool/call`.
	Arguments string
	// Index is the call's position in model order. RunStep sets it; callers need not.
	Index int
	// Mode is the call's execution mode as classified just before it started (REG-9); Exclusive
	// for a call that never started. RunStep sets it.
	Mode registry.Mode
	// Resume is set on every call of a step that a parked turn's new loop instance resumes
	// (extension E6, docs/rules.md): what the log already holds of the call. Nil otherwise.
	Resume *Resume
}

// Resume is what the log holds of one call of a resumed step.
type Resume struct {
	// Committed: the call's tool/result is in the log; the step skips the call.
	Committed bool
	// CallSeq is the seq of the call's logged tool/call, -1 when the call had not started. An
	// Emitter gives a started call's ToolCall this seq and appends nothing.
	CallSeq int64
	// Input is the resume input of a started call (registry.Input.Resumed): its logged ask, or
	// its client's result. Nil for a started call that is prepared again (one after a waiting
	// client call whose result had not been committed when the turn parked).
	Input *registry.Resumed
}

// Started reports whether c's tool/call is in the log already (a resumed call).
func (c Call) Started() bool { return c.Resume != nil && c.Resume.CallSeq >= 0 }

// Emitter records what the scheduler does. The agent loop implements it over the session log:
// ToolCall appends `tool/call`, ToolResult appends `tool/result` (SES-7), Contexts appends the
// `agent/inbox/spliced` handoff of LOOP-6.
//
// Calling discipline (what an implementation may rely on):
//   - All methods are called from one goroutine at a time (the scheduler's lane), never
//     concurrently, and in the order the events must appear in the log.
//   - For each call, ToolCall comes before the call's prepare stage, and ToolResult after its
//     ToolCall; Contexts, when the result has additionalContexts, comes right after that
//     call's ToolResult and before anything else is emitted.
//   - ToolResult events come in model order. Calls that never started get ToolCall immediately
//     followed by ToolResult (the synthetic SCHED-6 pair).
//   - The ctx passed is detached from the step signal's cancellation (context.WithoutCancel),
//     because results must still be recorded after an abort. It carries the step's values.
//   - Once any method returns an error, the scheduler calls no method of this Emitter again for
//     this step and returns the first error from RunStep (SCHED-7).
//
// Buffering: an implementation may buffer appends and write them in batches, but Flush must make
// everything emitted so far durable before it returns. The scheduler calls Flush before it launches
// any Dispatch (a body never starts before its `tool/call` is durable, so crash repair can tell a
// started call from one that never started) and once at the end of the step. Events that other
// components append while a call is being prepared (for example `approval/asked`) must land after
// that call's `tool/call`: an implementation that buffers must share its buffer with those writers
// or flush before they append.
type Emitter interface {
	// ToolCall appends `tool/call {turn, step, callId, name, arguments}` and returns its seq, which
	// the matching ToolResult cites.
	ToolCall(ctx context.Context, c Call) (seq int64, err error)
	// ToolResult appends the `tool/result` of c, citing callSeq in sourceEventSeqs. r is final and
	// shared: it must not be modified.
	ToolResult(ctx context.Context, c Call, callSeq int64, r *registry.Result) error
	// Contexts hands the additionalContexts of c's committed result to the next-step inbox (LOOP-6).
	// msgs is never empty and must not be modified.
	Contexts(ctx context.Context, c Call, msgs []llm.Message) error
	// Flush makes everything emitted so far durable. It is a no-op when nothing is pending.
	Flush(ctx context.Context) error
}

// StepEnder is an optional extension of Emitter. When the emitter implements it, the scheduler
// calls StepEnd, with the step's outcome, instead of the final Flush of a step: every started
// body has settled and every result has been emitted. An implementation must make durable the
// results of exclusive calls before it returns; it may keep the results of parallel (concurrency-
// safe) calls buffered a little longer, to write them with what it appends next, since losing one
// in a crash only turns it into TOOL_OUTCOME_UNKNOWN, whose text tells the model to retry only
// read-only or idempotent work. Flush keeps its meaning: the scheduler still calls it before every
// dispatch.
type StepEnder interface {
	StepEnd(ctx context.Context, out Outcome) error
}

// Launcher is an optional extension of Emitter. When the emitter implements it, the scheduler
// calls Launch, with the calls about to be dispatched (their Mode set), instead of the Flush that
// precedes a dispatch. An implementation must make durable everything emitted so far when any of
// the calls is exclusive. It may keep the events of an all-parallel (concurrency-safe) launch
// buffered, to write them with what it appends next: if the process dies first, neither the calls
// nor the assistant message that asked for them are in the log, so the step is taken again, and
// only work a concurrency-safe tool already did may be repeated.
type Launcher interface {
	Launch(ctx context.Context, calls []Call) error
}
