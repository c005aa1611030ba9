// Package fault is dshd's error vocabulary, a leaf that imports only the standard library: the
// application error with a stable machine code (Error), which the HTTP layer maps to a status in
// one table, and the machine part of a tool failure (Info) with the tool error codes of the
// session log (docs/events.md).
package fault

import (
	"errors"
	"fmt"
	"time"
)

// Info is the machine-readable part of a tool failure: the error class name and its code. It is
// persisted as `tool/result.error` (SES-7).
type Info struct {
	Name string `json:"name"`
	Code string `json:"code"`
}

// Tool error codes (the reference's codes plus dshd's extensions E1 and E2).
const (
	CodeUnknownTool           = "UNKNOWN_TOOL"
	CodeInvalidArgs           = "INVALID_ARGS"
	CodeInvalidToolOutput     = "INVALID_TOOL_OUTPUT"
	CodeUnsupportedSchema     = "UNSUPPORTED_SCHEMA"
	CodeAbortedBeforeDispatch = "ABORTED_BEFORE_DISPATCH"
	CodeAborted               = "ABORTED"
	CodeToolTimeout           = "TOOL_TIMEOUT"
	CodeCodeRunFailed         = "CODE_RUN_FAILED"
	CodeToolNotStarted        = "TOOL_NOT_STARTED"
	CodeToolOutcomeUnknown    = "TOOL_OUTCOME_UNKNOWN"
	CodeToolDenied            = "TOOL_DENIED"
	CodeApprovalRejected      = "APPROVAL_REJECTED"
	CodeApprovalCancelled     = "APPROVAL_CANCELLED"
)

// Application error codes: stable, machine-readable, part of the API contract (the HTTP layer
// maps each to a status and a problem title in one table).
const (
	Invalid             = "invalid_request"      // the input breaks a rule; nothing was changed
	NotFound            = "not_found"            // unknown, another tenant's, or deleted
	Conflict            = "conflict"             // the resource exists or changed meanwhile
	SessionNotLive      = "session_not_live"     // the session is not live (fork source)
	OpenTurn            = "open_turn"            // the operation needs a closed turn
	InvalidBoundary     = "invalid_boundary"     // a fork boundary that is not in the log
	IdempotencyConflict = "idempotency_conflict" // an Idempotency-Key reused with another request
	NoPreset            = "no_preset"            // the session has no preset to run
	PromptFailed        = "prompt_failed"        // the prompt does not assemble (PRM-8)
	RateLimited         = "rate_limited"         // too many posts to a session or by a tenant: retry later
	InboxFull           = "inbox_full"           // the session's pending inbox is at its bound: retry later
	LeaseLost           = "lease_lost"           // the writer no longer holds the session's run lease
	Stale               = "stale"                // the log moved on since the writer's head
	Unavailable         = "unavailable"          // a dependency (the database) is unreachable
	Internal            = "internal"             // anything else; details are logged, never shown
)

// Application error codes of the HTTP surface's limits on what a request may cost (the same table
// maps them).
const (
	UnsupportedMedia = "unsupported_media_type" // a request body that is not sent as JSON
	RequestTimeout   = "request_timeout"        // the request body did not arrive in time
	ServerBusy       = "server_busy"            // too many requests in flight without a key
	TooManyStreams   = "too_many_streams"       // the session or tenant has its most SSE streams open
)

// Application error codes of a tenant's quotas (docs/usage-and-quotas.md; the same table maps
// them).
const (
	QuotaExceeded = "quota_exceeded" // a tenant quota (tokens a day, sessions, stored log bytes) is spent
)

// Error is an application error: a stable Code, a Message safe to show to the caller, and the
// underlying error (logged, never shown). It is compared by code with Is, so sentinel values of
// it work with errors.Is.
type Error struct {
	Code    string
	Message string
	Err     error
}

// Error implements error.
func (e *Error) Error() string {
	if e.Err != nil && e.Message == "" {
		return e.Code + ": " + e.Err.Error()
	}
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same code and, when target has a message, the
// same message: errors.Is(err, fault.ErrNotFound) matches every not-found error.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Message == "" || t.Message == e.Message)
}

// New returns an *Error with code and a formatted message.
func New(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error with code and message around err.
func Wrap(code string, err error, message string) *Error {
	return &Error{Code: code, Message: message, Err: err}
}

// Code returns the code of the first *Error in err's chain, Internal for any other non-nil
// error, and "" for nil.
func Code(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}

// Message returns the caller-safe message of the first *Error in err's chain, or "" when there
// is none.
func Message(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return ""
}

// Sentinels for errors.Is: they match any *Error with their code.
var (
	ErrNotFound  = &Error{Code: NotFound}
	ErrConflict  = &Error{Code: Conflict}
	ErrLeaseLost = &Error{Code: LeaseLost}
	ErrStale     = &Error{Code: Stale}
	// ErrUnavailable matches the errors of an operation that failed because the database was
	// unreachable (a retry may succeed).
	ErrUnavailable = &Error{Code: Unavailable}
)

// Application error codes of tenant webhooks (docs/webhooks.md; the same table maps them).
const (
	WebhookURLNotAllowed = "webhook_url_not_allowed" // an endpoint URL that is not https or not public
	TooManyWebhooks      = "too_many_webhooks"       // the tenant has its most endpoints already
)

// Wait is the cause of a refusal that may succeed after a while (a rate limit, a daily quota): put
// in an Error's Err, it makes the HTTP layer send the wait as Retry-After.
type Wait time.Duration

// Error implements error.
func (w Wait) Error() string { return "retry after " + time.Duration(w).String() }

// RetryAfter is the wait.
func (w Wait) RetryAfter() time.Duration { return time.Duration(w) }
