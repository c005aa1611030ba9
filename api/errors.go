package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/tenant"
)

// Problem codes: stable, machine-readable, part of the API contract (openapi.yaml lists them).
// Most are the application's error codes (pkg/fault); the rest belong to HTTP itself.
const (
	CodeInvalidRequest      = fault.Invalid
	CodeNotFound            = fault.NotFound
	CodeConflict            = fault.Conflict
	CodeSessionNotLive      = fault.SessionNotLive
	CodeOpenTurn            = fault.OpenTurn
	CodeInvalidBoundary     = fault.InvalidBoundary
	CodeIdempotencyConflict = fault.IdempotencyConflict
	CodeNoPreset            = fault.NoPreset
	CodePromptFailed        = fault.PromptFailed
	CodeRateLimited         = fault.RateLimited
	CodeInboxFull           = fault.InboxFull
	CodeUnavailable         = fault.Unavailable
	CodeUnsupportedMedia    = fault.UnsupportedMedia
	CodeRequestTimeout      = fault.RequestTimeout
	CodeServerBusy          = fault.ServerBusy
	CodeTooManyStreams      = fault.TooManyStreams
	CodeInternal            = fault.Internal
	CodeUnauthorized        = "unauthorized"
	CodeMethodNotAllowed    = "method_not_allowed"
	CodePayloadTooLarge     = "payload_too_large"
	CodeNotReady            = "not_ready"
	CodeOriginNotAllowed    = "origin_not_allowed"
	CodeQuotaExceeded       = fault.QuotaExceeded
)

// Problem codes of a fork's copy of its source's workspace (docs/sandbox.md).
const (
	CodeSessionBusy            = "session_busy"             // a turn of the fork's source runs: fork it once the turn is over
	CodeWorkspaceQuotaExceeded = "workspace_quota_exceeded" // the copy would take the tenant's workspaces over DSHD_TENANT_WORKSPACE_BYTES
)

// Problem codes of tenant credentials and API keys (docs/credentials-and-keys.md).
const (
	CodeCredentialsDisabled = tenant.CodeCredentialsDisabled // the server has no DSHD_CREDENTIAL_KEYS
	CodeUnknownCredential   = tenant.CodeUnknownCredential   // a preset names a credential the tenant lacks
	CodeInsufficientScope   = "insufficient_scope"           // the API key lacks the scope the request needs
)

// Problem codes of tenant webhooks (docs/webhooks.md).
const (
	CodeWebhookURLNotAllowed = fault.WebhookURLNotAllowed
	CodeTooManyWebhooks      = fault.TooManyWebhooks
)

// problemTable is the one place an error code gets its HTTP status and title. A code missing here
// answers 500.
var problemTable = map[string]struct {
	status int
	title  string
}{
	CodeInvalidRequest:      {http.StatusBadRequest, "Invalid request"},
	CodeInvalidBoundary:     {http.StatusBadRequest, "Invalid fork boundary"},
	CodeUnauthorized:        {http.StatusUnauthorized, "Unauthorized"},
	CodeOriginNotAllowed:    {http.StatusForbidden, "Origin not allowed"},
	CodeNotFound:            {http.StatusNotFound, "Not found"},
	CodeMethodNotAllowed:    {http.StatusMethodNotAllowed, "Method not allowed"},
	CodeConflict:            {http.StatusConflict, "Conflict"},
	CodeSessionNotLive:      {http.StatusConflict, "Session is not live"},
	CodeOpenTurn:            {http.StatusConflict, "Turn still open"},
	CodeIdempotencyConflict: {http.StatusConflict, "Idempotency key reused"},
	CodeNoPreset:            {http.StatusConflict, "Session has no preset"},
	CodePayloadTooLarge:     {http.StatusRequestEntityTooLarge, "Payload too large"},
	CodeUnsupportedMedia:    {http.StatusUnsupportedMediaType, "Unsupported media type"},
	CodeRequestTimeout:      {http.StatusRequestTimeout, "Request timeout"},
	CodePromptFailed:        {http.StatusUnprocessableEntity, "Prompt assembly failed"},
	CodeRateLimited:         {http.StatusTooManyRequests, "Too many requests"},
	CodeInboxFull:           {http.StatusTooManyRequests, "Inbox full"},
	CodeTooManyStreams:      {http.StatusTooManyRequests, "Too many streams"},
	CodeNotReady:            {http.StatusServiceUnavailable, "Not ready"},
	CodeUnavailable:         {http.StatusServiceUnavailable, "Service unavailable"},
	CodeServerBusy:          {http.StatusServiceUnavailable, "Server busy"},
	CodeInternal:            {http.StatusInternalServerError, "Internal error"},
	CodeCredentialsDisabled: {http.StatusConflict, "Credentials disabled"},
	CodeUnknownCredential:   {http.StatusBadRequest, "Unknown credential"},
	CodeInsufficientScope:   {http.StatusForbidden, "Insufficient scope"},

	CodeWebhookURLNotAllowed: {http.StatusBadRequest, "Webhook URL not allowed"},
	CodeTooManyWebhooks:      {http.StatusConflict, "Too many webhook endpoints"},
	CodeQuotaExceeded:        {http.StatusTooManyRequests, "Quota exceeded"},

	CodeSessionBusy:            {http.StatusConflict, "Session busy"},
	CodeWorkspaceQuotaExceeded: {http.StatusConflict, "Workspace quota exceeded"},
}

// Problem is an RFC 9457 problem document, sent as application/problem+json.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
	// Errors, on an invalid request, name each value at fault (fields.go); Detail sums them up.
	Errors []FieldError `json:"errors,omitempty"`
}

// retryAfterUnavailable is the Retry-After (seconds) of an unavailable answer: the database is
// unreachable, and a short outage (a restart, a failover) is over in seconds.
const retryAfterUnavailable = "2"

func errorf(code, detail string) *fault.Error { return &fault.Error{Code: code, Message: detail} }

// classify turns any error into a problem code and a detail safe to show: the code and message
// of the first application error (*fault.Error) in its chain. Anything else is internal: its text
// is logged, never shown.
func classify(err error) (code, detail string) {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return CodePayloadTooLarge, "the request body is larger than the limit of the server"
	}
	code, detail = fault.Code(err), fault.Message(err)
	if _, known := problemTable[code]; !known || code == CodeInternal || detail == "" {
		return CodeInternal, "internal error"
	}
	return code, detail
}

// writeError answers with the problem document for err. Internal errors are logged with the
// request's attributes; a client that went away is not an error worth logging.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	code, detail := classify(err)
	if code == CodeInternal && !errors.Is(err, context.Canceled) {
		logger(r).LogAttrs(r.Context(), slog.LevelError, "internal error", slog.String("error", err.Error()))
	}
	// A refusal that may be retried after a while (rate_limited) says when, in whole seconds.
	var ra interface{ RetryAfter() time.Duration }
	if code != CodeInternal && errors.As(err, &ra) {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(ra.RetryAfter().Seconds())))))
	}
	var fields []FieldError
	if code != CodeInternal {
		fields = fieldErrors(err)
	}
	writeProblemFields(w, code, detail, fields)
}

func writeProblem(w http.ResponseWriter, code, detail string) {
	writeProblemFields(w, code, detail, nil)
}

// writeProblemFields writes the problem document of code, with the values at fault (fields, nil
// for none).
func writeProblemFields(w http.ResponseWriter, code, detail string, fields []FieldError) {
	entry, ok := problemTable[code]
	if !ok {
		code, entry = CodeInternal, problemTable[CodeInternal]
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	if code == CodeUnavailable {
		w.Header().Set("Retry-After", retryAfterUnavailable)
	}
	w.WriteHeader(entry.status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(Problem{Type: "urn:dshd:problem:" + code, Title: entry.title,
		Status: entry.status, Code: code, Detail: detail, Errors: fields})
}
