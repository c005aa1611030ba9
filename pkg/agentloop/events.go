package agentloop

import (
	"encoding/json"

	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
)

// TypeCancel is dshd's durable cancel request: `agent/cancel {reason, keepInbox}`. It is written
// with ignorable:true, so readers that do not know it (SES-9) still accept the log. The runner of
// the session's turn, on any replica, aborts the turn when it sees one.
const TypeCancel = "agent/cancel"

// Turn end reason kinds (LOOP-8).
const (
	EndCompleted   = "completed"
	EndAborted     = "aborted"
	EndBlocked     = "blocked"
	EndError       = "error"
	EndMaxTokens   = "max-tokens"
	EndInterrupted = "interrupted"
)

// Error codes the loop itself puts in `turn/end.reason.error.code`.
const (
	CodeUnknown  = "UNKNOWN"
	CodeMaxSteps = "MAX_STEPS"
	CodePrompt   = "PROMPT_ASSEMBLY"
)

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

// Reason is the `reason` of `turn/end`.
type Reason struct {
	Kind   string     `json:"kind"`
	Reason *Cause     `json:"reason,omitempty"`
	Error  *TurnError `json:"error,omitempty"`
}

type turnData struct {
	Turn int `json:"turn"`
}

type turnEndData struct {
	Turn   int    `json:"turn"`
	Reason Reason `json:"reason"`
}

type stepData struct {
	Turn int `json:"turn"`
	Step int `json:"step"`
}

type chunkData struct {
	Turn  int        `json:"turn"`
	Step  int        `json:"step"`
	Chunk *llm.Chunk `json:"chunk"`
}

type assistantData struct {
	Turn        int         `json:"turn"`
	Step        int         `json:"step"`
	Message     llm.Message `json:"message"`
	Usage       *llm.Usage  `json:"usage,omitempty"`
	Interrupted bool        `json:"interrupted,omitempty"`
}

type toolCallData struct {
	Turn      int    `json:"turn"`
	Step      int    `json:"step"`
	CallID    string `json:"callId"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type toolResultData struct {
	Turn      int                     `json:"turn"`
	Step      int                     `json:"step"`
	Message   llm.Message             `json:"message"`
	Error     *registry.ErrorInfo     `json:"error,omitempty"`
	Meta      json.RawMessage         `json:"meta,omitempty"`
	Mutations []registry.FileMutation `json:"mutations,omitempty"`
}

// Header is the request header of SES-13: the model configuration, the adapter-default markers,
// the system prompt and the wire tools. Empty system and tools are dropped (canonical form).
type Header struct {
	Config         llm.Config       `json:"config"`
	AdapterDefault map[string]bool  `json:"adapterDefaults,omitempty"`
	System         string           `json:"system,omitempty"`
	Tools          []llm.ToolSchema `json:"tools,omitempty"`
}

// retryData is an `llm/retry`: the model request of (turn, step) failed with code (message,
// status) and is sent again after delayMs. attempt numbers the failed request, from 1, which is
// also the number of the retry; maxRetries is the step's retry budget (the preset's
// model.retries).
type retryData struct {
	Turn       int    `json:"turn"`
	Step       int    `json:"step"`
	Provider   string `json:"provider"`
	Attempt    int    `json:"attempt"`
	MaxRetries int    `json:"maxRetries"`
	DelayMs    int64  `json:"delayMs"`
	Code       string `json:"code"`
	Message    string `json:"message,omitempty"`
	Status     int    `json:"status,omitempty"`
}

type headerData struct {
	Header json.RawMessage `json:"header"`
	Reason string          `json:"reason"`
}

type contextData struct {
	Provider      string `json:"provider"`
	Model         string `json:"model"`
	ContextWindow int    `json:"contextWindow,omitempty"`
}

// CancelData is the data of an `agent/cancel` event.
type CancelData struct {
	Reason    Cause `json:"reason"`
	KeepInbox bool  `json:"keepInbox,omitempty"`
}
