package agentloop

import (
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
)

// ParkConfig lets a runner's turns park (extension E6, docs/rules.md): a call whose ask waits
// for a person, or a client-executed call, commits what it can and the turn parks instead of
// holding the runner; the answer resumes it as a new loop instance.
type ParkConfig struct {
	// ApprovalTimeout is how long a parked ask waits for its answer: its wait's DeadlineMs is
	// the park's time plus this (the approval service's default when zero).
	ApprovalTimeout time.Duration
}

// Parked returns the park of the session's turn when the runner's view of the log ends with a
// parked turn (eventlog.Parked), with what was answered since.
func (r *Runner) Parked() (eventlog.Park, bool) {
	if _, open := r.m.log.OpenTurn(); !open {
		return eventlog.Park{}, false
	}
	return eventlog.Parked(r.m.log.From(r.m.turnSeq))
}
