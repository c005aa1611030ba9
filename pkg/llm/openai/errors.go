package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dshd/dshd/pkg/llm"
)

// errIdle is the cancellation cause when no byte arrived for Config.IdleTimeout.
var errIdle = errors.New("openai: no data received within the idle timeout")

// statusError maps a non-2xx response to an *llm.Error:
//
//	401, 403                                   INVALID_CREDENTIAL
//	402, or any 4xx mentioning an insufficient
//	balance or quota                           QUOTA
//	400, 413, 422 mentioning the context length CONTEXT_WINDOW_EXCEEDED
//	408                                        TIMEOUT
//	429                                        RATE_LIMIT (retryable)
//	5xx                                        SERVER (retryable)
//	any other status                           SERVER, not retryable
//
// The message is the body's error.message when it has one, else the body itself (clipped).
func statusError(status int, body []byte) *llm.Error {
	var eb ErrorBody
	msg := strings.TrimSpace(clip(body, 500))
	if json.Unmarshal(body, &eb) == nil && eb.Error.Message != "" {
		return apiError(status, eb.Error)
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return apiError(status, APIError{Message: msg})
}

// apiError classifies an error object by status (0 for an error inside a 200 stream) and text.
func apiError(status int, ae APIError) *llm.Error {
	text := strings.ToLower(ae.Message + " " + ae.Type + " " + string(ae.Code))
	code := llm.CodeServer
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		code = llm.CodeInvalidCredential
	case status == http.StatusPaymentRequired || mentionsQuota(text):
		code = llm.CodeQuota
	case status == http.StatusTooManyRequests || (status == 0 && strings.Contains(text, "rate limit")):
		code = llm.CodeRateLimit
	case mentionsContextLength(text):
		code = llm.CodeContextWindowExceeded
	case status == http.StatusRequestTimeout:
		code = llm.CodeTimeout
	}
	e := llm.NewError(code, "%s", ae.Message)
	e.Status = status
	if code == llm.CodeServer && status != 0 && status < 500 {
		e.Retryable = false
	}
	return e
}

func mentionsQuota(s string) bool {
	return strings.Contains(s, "insufficient balance") || strings.Contains(s, "insufficient_balance") ||
		strings.Contains(s, "insufficient_quota") || strings.Contains(s, "exceeded your current quota")
}

func mentionsContextLength(s string) bool {
	for _, p := range []string{"context length", "context_length", "maximum context", "context window",
		"too many tokens", "prompt is too long", "reduce the length"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// readError maps a failure to send a request or to read a body. A cancelled parent context
// gives the context error itself (context.Canceled) or, for a deadline, TIMEOUT; the idle timer
// gives TIMEOUT; anything else is TRANSPORT.
func readError(parent, attempt context.Context, err error, what string) error {
	if perr := parent.Err(); perr != nil {
		if errors.Is(perr, context.DeadlineExceeded) {
			e := llm.NewError(llm.CodeTimeout, "%s: %v", what, perr)
			e.Err = perr
			return e
		}
		return perr
	}
	if errors.Is(context.Cause(attempt), errIdle) {
		e := llm.NewError(llm.CodeTimeout, "%s: %v", what, errIdle)
		e.Err = errIdle
		return e
	}
	e := llm.NewError(llm.CodeTransport, "%s: %v", what, err)
	e.Err = err
	return e
}

// retryAfter parses a Retry-After header: delay seconds or an HTTP date. ok is false when the
// header is absent or unreadable.
func retryAfter(h string, now time.Time) (d time.Duration, ok bool) {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0, false
	}
	if secs, err := strconv.ParseFloat(h, 64); err == nil && secs >= 0 && secs < 1e6 {
		return time.Duration(secs * float64(time.Second)), true
	}
	t, err := http.ParseTime(h)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}
