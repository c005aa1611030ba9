package agentloop

import "github.com/dshd/dshd/pkg/eventlog"

// Error codes the loop itself puts in `turn/end.reason.error.code`.
const (
	CodeUnknown  = "UNKNOWN"
	CodeMaxSteps = "MAX_STEPS"
	CodePrompt   = "PROMPT_ASSEMBLY"
)

// Cause says why a turn was aborted (the log's vocabulary).
type Cause = eventlog.Cause

// Reason is how a turn ended (the log's vocabulary).
type Reason = eventlog.TurnReason
