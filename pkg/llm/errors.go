package llm

import "fmt"

// RetryableCode reports whether a failure with this LLM error code may succeed when the same
// request is sent again: rate limits, server errors, transport failures and timeouts.
func RetryableCode(code string) bool {
	switch code {
	case CodeRateLimit, CodeServer, CodeTransport, CodeTimeout:
		return true
	}
	return false
}

// NewError returns an *Error with the given code and message; Retryable follows
// RetryableCode. Set Status and Err on the result where they are known.
func NewError(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Retryable: RetryableCode(code)}
}
