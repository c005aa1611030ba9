package eventlog

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
)

// Payload is the data of one event kind: every kind of the vocabulary has exactly one payload
// type, declared in this file, and everything that writes, validates, repairs or reads events uses
// it. Type names the kind; Validate checks what readers of the log rely on (SES-6, SES-7, SES-8,
// SES-12), not every optional field. docs/events.md lists every kind with its payload.
type Payload interface {
	Type() string
	Validate() error
}

// kinds maps each kind that has a payload to a constructor of an empty one: validation decodes an
// event's data into it and calls Validate.
var kinds = map[string]func() Payload{}

func init() {
	for _, f := range []func() Payload{
		func() Payload { return new(TurnStart) }, func() Payload { return new(TurnEnd) },
		func() Payload { return new(StepStart) }, func() Payload { return new(StepEnd) },
		func() Payload { return new(UserMessage) }, func() Payload { return new(AssistantChunk) },
		func() Payload { return new(AssistantMessage) }, func() Payload { return new(ToolCall) },
		func() Payload { return new(ToolResult) }, func() Payload { return new(TodoWrite) },
		func() Payload { return new(RequestHeader) }, func() Payload { return new(RequestContext) },
		func() Payload { return new(SessionEndSeed) }, func() Payload { return new(InboxSpliced) },
		func() Payload { return new(ApprovalAsked) }, func() Payload { return new(ApprovalDecided) },
		func() Payload { return new(ApprovalPolicy) }, func() Payload { return new(CodeDispatchStart) },
		func() Payload { return new(CodeDispatch) }, func() Payload { return new(LLMRetry) },
		func() Payload { return new(AgentCancel) }, func() Payload { return new(TurnTrace) },
		func() Payload { return new(AssistantUsage) }, func() Payload { return new(TurnParked) },
		func() Payload { return new(TurnResumed) }, func() Payload { return new(ClientResult) },
	} {
		kinds[f().Type()] = f
	}
}

// Payloads returns an empty payload of every kind that has a payload type, sorted by kind: the
// data shapes of the vocabulary, for generators of their schemas (internal/openapigen writes
// openapi.yaml's event schemas from them).
func Payloads() []Payload {
	out := make([]Payload, 0, len(kinds))
	for _, f := range kinds {
		out = append(out, f())
	}
	slices.SortFunc(out, func(a, b Payload) int { return strings.Compare(a.Type(), b.Type()) })
	return out
}

// DecodePayload decodes the data of a known kind into its payload. It does not validate.
func DecodePayload(typ string, data []byte) (Payload, error) {
	f := kinds[typ]
	if f == nil {
		return nil, fmt.Errorf("eventlog: %s has no payload type", typ)
	}
	p := f()
	if err := json.Unmarshal(data, p); err != nil {
		return nil, err
	}
	return p, nil
}

// Decode decodes an event's data into the payload type P (a pointer to a payload struct, as
// *eventlog.ToolCall). The event must be of P's kind.
func Decode[P any, PP interface {
	*P
	Payload
}](ev Event) (P, error) {
	var p P
	if want := PP(&p).Type(); ev.Type != want {
		return p, fmt.Errorf("eventlog: event %d is %s, not %s", ev.Seq, ev.Type, want)
	}
	err := json.Unmarshal(ev.Data, &p)
	return p, err
}

// TurnStart opens turn Turn (SES-8, LOOP-2), in the reference's shape: the trace of the turn's
// spans is the extension event TurnTrace.
type TurnStart struct {
	Turn int `json:"turn"`
}

// TurnEnd closes turn Turn with its Reason (LOOP-8).
type TurnEnd struct {
	Turn   int        `json:"turn"`
	Reason TurnReason `json:"reason"`
}

// Turn end reason kinds (LOOP-8).
const (
	EndCompleted   = "completed"
	EndAborted     = "aborted"
	EndBlocked     = "blocked"
	EndError       = "error"
	EndMaxTokens   = "max-tokens"
	EndInterrupted = "interrupted"
)

// TurnReason is the `reason` of `turn/end`: a Kind, the Cause of an abort, the Error of a failure.
type TurnReason struct {
	Kind   string     `json:"kind"`
	Reason *Cause     `json:"reason,omitempty"`
	Error  *TurnError `json:"error,omitempty"`
}

// Cause says why a turn was aborted: `user`, `parent`, `hook` (with Reason) or `disposed`.
type Cause struct {
	Kind   string `json:"kind"`
	Reason string `json:"reason,omitempty"`
}

// TurnError is the error of a turn that ended with kind `error`.
type TurnError struct {
	Message string `json:"message"`
	Code    string `json:"code"`
	Status  int    `json:"status,omitempty"`
}

// StepStart opens step Step of turn Turn.
type StepStart struct {
	Turn int `json:"turn"`
	Step int `json:"step"`
}

// StepEnd closes step Step of turn Turn.
type StepEnd StepStart

// UserMessage is a user message entering the surface (its data is the message itself).
type UserMessage struct{ llm.Message }

// AssistantChunk is one streamed piece of the step's model output.
type AssistantChunk struct {
	Turn  int        `json:"turn"`
	Step  int        `json:"step"`
	Chunk *llm.Chunk `json:"chunk"`
}

// AssistantMessage is the assembled model output of a step, citing its chunks.
type AssistantMessage struct {
	Turn        int         `json:"turn"`
	Step        int         `json:"step"`
	Message     llm.Message `json:"message"`
	Usage       *llm.Usage  `json:"usage,omitempty"`
	Interrupted bool        `json:"interrupted,omitempty"`
}

// ToolCall records that a call started (SCHED-3); Arguments is the model's raw argument string.
type ToolCall struct {
	Turn      int    `json:"turn"`
	Step      int    `json:"step"`
	CallID    string `json:"callId"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`

	noArguments bool // decoded without an arguments string
}

// ToolResult is a call's final result (SES-7): the tool-result message, the error info when the
// failure had a code, the presentation meta and the file mutations.
type ToolResult struct {
	Turn      int             `json:"turn"`
	Step      int             `json:"step"`
	Message   llm.Message     `json:"message"`
	Error     *fault.Info     `json:"error,omitempty"`
	Meta      json.RawMessage `json:"meta,omitempty"`
	Mutations []FileMutation  `json:"mutations,omitempty"`
}

// FileMutation records a committed file change (RES-6). Version is always 1; CommitOrder is
// monotonic per session.
type FileMutation struct {
	Version     int    `json:"version"`
	CommitOrder int64  `json:"commitOrder"`
	Path        string `json:"path"`
	Kind        string `json:"kind,omitempty"`
	SHA1        string `json:"sha1,omitempty"`
	SHA256      string `json:"sha256,omitempty"`
}

// TodoWrite replaces the session's todo list.
type TodoWrite struct {
	Todos []Todo `json:"todos"`
}

// Todo is one entry of a todo list.
type Todo struct {
	Content string `json:"content"`
	Status  string `json:"status"`
}

// RequestHeader records the model request's header (SES-12, SES-13) and why it was logged:
// `initial`, `resume` or `change`.
type RequestHeader struct {
	Header ModelHeader `json:"header"`
	Reason string      `json:"reason"`
}

// ModelHeader is a model request header: the effective model configuration (no secrets), which of its
// fields are the adapter's defaults, the system prompt and the wire tools. Canonical form drops an
// empty system prompt and an empty tool list (SES-13).
type ModelHeader struct {
	Config          llm.Config       `json:"config"`
	AdapterDefaults map[string]bool  `json:"adapterDefaults,omitempty"`
	System          string           `json:"system,omitempty"`
	Tools           []llm.ToolSchema `json:"tools,omitempty"`
}

// RequestContext records the route of the model call: provider, model and context window.
type RequestContext struct {
	Provider      string `json:"provider"`
	Model         string `json:"model"`
	ContextWindow int    `json:"contextWindow,omitempty"`
}

// SessionEndSeed marks the end of a seed or a fork's copied prefix (SES-12, SES-15).
type SessionEndSeed struct{}

// InboxSpliced is a change of the durable inbox (LOOP-1): at Start in Target, RemovedCount
// messages are removed and Inserted are inserted. An insertion carries no removedCount; a claim
// at a step boundary is a deletion with no outcome; a cancel is a deletion with outcome
// "canceled".
type InboxSpliced struct {
	Target       string        `json:"target"`
	Start        int           `json:"start"`
	RemovedCount *int          `json:"removedCount,omitempty"`
	Inserted     []llm.Message `json:"inserted"`
	Outcome      string        `json:"outcome,omitempty"`
}

// ApprovalAsked is a pending approval of a call (APR-3, E1): its id, the tool, the call, the
// reason, and the call's arguments so that a remote person can decide.
type ApprovalAsked struct {
	ID        string          `json:"id"`
	ToolName  string          `json:"toolName"`
	CallID    string          `json:"callId,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// ApprovalDecided answers approval ID (APR-3): allowed-once, rejected, cancelled or unavailable.
type ApprovalDecided struct {
	ID      string `json:"id"`
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
}

// ApprovalPolicy sets the session's approval policy (APR-4, APR-6): `ask` or `never`.
type ApprovalPolicy struct {
	Policy string `json:"policy"`
}

// CodeDispatchStart records that a `run_code` sub-call started (CODE-7).
type CodeDispatchStart struct {
	RootCallID   string          `json:"rootCallId"`
	ParentCallID string          `json:"parentCallId"`
	SubCallID    string          `json:"subCallId"`
	Name         string          `json:"name"`
	Arguments    json.RawMessage `json:"arguments"`
	Location     json.RawMessage `json:"location,omitempty"`
}

// CodeDispatch records that a `run_code` sub-call settled (CODE-7), with its final content.
type CodeDispatch struct {
	CodeDispatchStart
	IsError   bool           `json:"isError"`
	Content   []llm.Block    `json:"content"`
	Mutations []FileMutation `json:"mutations,omitempty"`
}

// LLMRetry records that the model request of (turn, step) failed and is sent again after
// DelayMs: Attempt numbers the failed request from 1 (it is also the number of the retry),
// MaxRetries is the step's retry budget (the preset's model.retries), and Code, Message and
// Status are the failure's. The reference writes the failure as {failure: {code, ...}}; both
// shapes are read.
type LLMRetry struct {
	Turn       int          `json:"turn"`
	Step       int          `json:"step"`
	Provider   string       `json:"provider,omitempty"`
	Attempt    int          `json:"attempt"`
	MaxRetries int          `json:"maxRetries,omitempty"`
	DelayMs    float64      `json:"delayMs"`
	Code       string       `json:"code,omitempty"`
	Message    string       `json:"message,omitempty"`
	Status     int          `json:"status,omitempty"`
	Failure    *llm.Failure `json:"failure,omitempty"`
}

// AgentCancel is dshd's durable cancel request (LOOP-7), written ignorable so that readers that
// do not know it still accept the log (SES-9). The runner of the session's turn, on any replica,
// aborts the turn when it sees one.
type AgentCancel struct {
	Reason    Cause `json:"reason"`
	KeepInbox bool  `json:"keepInbox,omitempty"`
}

// TurnTrace is dshd's extension event, written ignorable right after turn/start (the next seq)
// when the replica that runs the turn traces it: TraceID is the OpenTelemetry trace id (32
// lowercase hex digits) of the turn's spans (docs/observability.md).
type TurnTrace struct {
	Turn    int    `json:"turn"`
	TraceID string `json:"traceId"`
}

// AssistantUsage is dshd's extension event, written ignorable right after an interrupted
// assistant/message (which carries no usage, as in the reference): the usage of the model call a
// cancel cut off, the provider's when its usage chunk came before the cancel, else an estimate
// marked Estimated (llm.EstimateUsage). The usage fold counts it like a message's usage.
type AssistantUsage struct {
	Turn  int       `json:"turn"`
	Step  int       `json:"step"`
	Usage llm.Usage `json:"usage"`
}

// Type implementations.

func (TurnStart) Type() string         { return TypeTurnStart }
func (TurnEnd) Type() string           { return TypeTurnEnd }
func (StepStart) Type() string         { return TypeStepStart }
func (StepEnd) Type() string           { return TypeStepEnd }
func (UserMessage) Type() string       { return TypeUserMessage }
func (AssistantChunk) Type() string    { return TypeAssistantChunk }
func (AssistantMessage) Type() string  { return TypeAssistantMessage }
func (ToolCall) Type() string          { return TypeToolCall }
func (ToolResult) Type() string        { return TypeToolResult }
func (TodoWrite) Type() string         { return TypeTodoWrite }
func (RequestHeader) Type() string     { return TypeRequestHeader }
func (RequestContext) Type() string    { return TypeRequestContext }
func (SessionEndSeed) Type() string    { return TypeSessionEndSeed }
func (InboxSpliced) Type() string      { return TypeInboxSpliced }
func (ApprovalAsked) Type() string     { return TypeApprovalAsked }
func (ApprovalDecided) Type() string   { return TypeApprovalDecided }
func (ApprovalPolicy) Type() string    { return TypeApprovalPolicy }
func (CodeDispatchStart) Type() string { return TypeToolCodeDispatchInit }
func (CodeDispatch) Type() string      { return TypeToolCodeDispatch }
func (LLMRetry) Type() string          { return TypeLLMRetry }
func (AgentCancel) Type() string       { return TypeAgentCancel }
func (TurnTrace) Type() string         { return TypeTurnTrace }
func (AssistantUsage) Type() string    { return TypeAssistantUsage }
