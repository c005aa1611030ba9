package eventlog

import "fmt"

// Fork error codes (SPEC.md section (c), SES-15).
const (
	ForkSessionNotFound      = "SESSION_NOT_FOUND"
	ForkSessionNotLive       = "SESSION_NOT_LIVE"
	ForkSessionAlreadyExists = "SESSION_ALREADY_EXISTS"
	ForkInvalidBoundary      = "INVALID_BOUNDARY"
	ForkOpenTurn             = "OPEN_TURN"
)

// ForkError is a refused fork (SES-15). Code is one of the Fork* codes.
type ForkError struct {
	Code    string
	Message string
}

func (e *ForkError) Error() string { return fmt.Sprintf("eventlog: fork: %s: %s", e.Code, e.Message) }
