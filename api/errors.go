package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/tenant"
	"github.com/dshd/dshd/pkg/worker"
)

// Problem codes: stable, machine-readable, part of the API contract (openapi.yaml lists them).
const (
	CodeInvalidRequest   = "invalid_request"
	CodeUnauthorized     = "unauthorized"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeConflict         = "conflict"
	CodeSessionNotLive   = "session_not_live"
	CodeOpenTurn         = "open_turn"
	CodeInvalidBoundary  = "invalid_boundary"
	CodePayloadTooLarge  = "payload_too_large"
	CodeNotReady         = "not_ready"
	CodeInternal         = "internal"
	// CodeIdempotencyConflict: the Idempotency-Key was used before with a different request.
	CodeIdempotencyConflict = "idempotency_conflict"
	// CodeNoPreset: the session has no preset, so it cannot run turns.
	CodeNoPreset = "no_preset"
	// CodePromptFailed: the session's prompt does not assemble (PRM-8), for example a toolOrder
	// naming a tool the preset does not have.
	CodePromptFailed = "prompt_failed"
)

// problemTable is the one place a problem code gets its HTTP status and title.
var problemTable = map[string]struct {
	status int
	title  string
}{
	CodeInvalidRequest:   {http.StatusBadRequest, "Invalid request"},
	CodeInvalidBoundary:  {http.StatusBadRequest, "Invalid fork boundary"},
	CodeUnauthorized:     {http.StatusUnauthorized, "Unauthorized"},
	CodeNotFound:         {http.StatusNotFound, "Not found"},
	CodeMethodNotAllowed: {http.StatusMethodNotAllowed, "Method not allowed"},
	CodeConflict:         {http.StatusConflict, "Conflict"},
	CodeSessionNotLive:   {http.StatusConflict, "Session is not live"},
	CodeOpenTurn:         {http.StatusConflict, "Turn still open"},
	CodePayloadTooLarge:  {http.StatusRequestEntityTooLarge, "Payload too large"},
	CodeNotReady:         {http.StatusServiceUnavailable, "Not ready"},
	CodeInternal:         {http.StatusInternalServerError, "Internal error"},

	CodeIdempotencyConflict: {http.StatusConflict, "Idempotency key reused"},
	CodeNoPreset:            {http.StatusConflict, "Session has no preset"},
	CodePromptFailed:        {http.StatusUnprocessableEntity, "Prompt assembly failed"},
}

// Problem is an RFC 9457 problem document, sent as application/problem+json.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// Error is an error raised by the HTTP layer itself, with its problem code.
type Error struct {
	Code   string
	Detail string
}

func (e *Error) Error() string { return e.Code + ": " + e.Detail }

func errorf(code, detail string) *Error { return &Error{Code: code, Detail: detail} }

// forkCodes maps SES-15 fork error codes to problem codes.
var forkCodes = map[string]string{
	pgstore.ForkSessionNotFound:      CodeNotFound,
	pgstore.ForkSessionAlreadyExists: CodeConflict,
	pgstore.ForkSessionNotLive:       CodeSessionNotLive,
	pgstore.ForkOpenTurn:             CodeOpenTurn,
	pgstore.ForkInvalidBoundary:      CodeInvalidBoundary,
}

// classify turns any error into a problem code and a detail safe to show. Errors it does not know
// are internal: their text is logged, never shown.
func classify(err error) (code, detail string) {
	var (
		apiErr   *Error
		presetVE *preset.ValidationError
		logVE    *eventlog.ValidationError
		forkErr  *pgstore.ForkError
		tooLarge *http.MaxBytesError
	)
	switch {
	case errors.As(err, &apiErr):
		return apiErr.Code, apiErr.Detail
	case errors.As(err, &tooLarge):
		return CodePayloadTooLarge, "the request body is larger than the limit of the server"
	case errors.As(err, &presetVE):
		return CodeInvalidRequest, presetVE.Error()
	case errors.As(err, &forkErr):
		code, ok := forkCodes[forkErr.Code]
		if !ok {
			return CodeInternal, "internal error"
		}
		return code, forkErr.Code + ": " + forkErr.Message
	case errors.As(err, &logVE) && logVE.Rule == "cursor":
		return CodeInvalidRequest, "invalid cursor"
	case errors.As(err, &logVE):
		return CodeInvalidRequest, logVE.Error()
	case errors.Is(err, worker.ErrIdempotencyConflict):
		return CodeIdempotencyConflict, "the Idempotency-Key was used before with a different request"
	case errors.Is(err, worker.ErrNoPreset):
		return CodeNoPreset, "the session has no preset to run its turns"
	case errors.Is(err, preset.ErrNotFound):
		return CodeNotFound, "preset not found"
	case errors.Is(err, eventlog.ErrNotFound):
		return CodeNotFound, "session not found"
	case errors.Is(err, tenant.ErrNotFound):
		return CodeNotFound, "tenant not found"
	case errors.Is(err, eventlog.ErrConflict):
		return CodeConflict, "a session with this id already exists"
	case errors.Is(err, preset.ErrInvalidCursor):
		return CodeInvalidRequest, "invalid cursor"
	case errors.Is(err, tenant.ErrInvalidName):
		return CodeInvalidRequest, tenant.ErrInvalidName.Error()
	}
	return CodeInternal, "internal error"
}

// writeError answers with the problem document for err. Internal errors are logged with the
// request's attributes; a client that went away is not an error worth logging.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	code, detail := classify(err)
	if code == CodeInternal && !errors.Is(err, context.Canceled) {
		logger(r).LogAttrs(r.Context(), slog.LevelError, "internal error", slog.String("error", err.Error()))
	}
	writeProblem(w, code, detail)
}

func writeProblem(w http.ResponseWriter, code, detail string) {
	entry, ok := problemTable[code]
	if !ok {
		code, entry = CodeInternal, problemTable[CodeInternal]
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(entry.status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(Problem{Type: "urn:dshd:problem:" + code, Title: entry.title,
		Status: entry.status, Code: code, Detail: detail})
}
