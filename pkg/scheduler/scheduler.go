package scheduler

import (
	"context"

	"github.com/dshd/dshd/pkg/registry"
)

// Scheduler runs the tool calls of assistant steps through a Pipeline. It holds only immutable
// configuration, so one Scheduler is safe for concurrent use by any number of RunStep calls.
type Scheduler struct {
	pipe Pipeline
	cfg  Config

	// onWait, when set (tests only), is called on the lane just before it blocks waiting for a
	// dispatched body to settle. It is the scheduler's test signal: at that point the lane can
	// make no progress until some body settles.
	onWait func()
}

// New returns a Scheduler over p. Unset Config fields take their documented defaults.
func New(p Pipeline, cfg Config) *Scheduler {
	return &Scheduler{pipe: p, cfg: cfg.withDefaults()}
}

// CallResult is the committed result of one call.
type CallResult struct {
	// Call is the call, with its Index set.
	Call Call
	// CallSeq is the seq the emitter returned for the call's `tool/call`.
	CallSeq int64
	// Result is the final result; it must not be modified.
	Result *registry.Result
	// Synthetic is true for the ABORTED_BEFORE_DISPATCH result of a call that never started
	// (SCHED-6).
	Synthetic bool
}

// Outcome is what a step's tool execution produced.
type Outcome struct {
	// Results holds one entry per call whose `tool/result` was emitted, in model order. After an
	// internal failure it may be shorter than the call list.
	Results []CallResult
	// Aborted is true when the step signal was found cancelled; the turn then ends aborted
	// (SCHED-6).
	Aborted bool
	// ConcludesTurn is true when any committed result had ConcludesTurn (RES-5, LOOP-5).
	ConcludesTurn bool
	// Parked lists the calls the step waits for outside the server, in model order, when it
	// parked (Step.Park): every result before the first of them is committed, no body is in
	// flight, and no call after the last of them has started. Empty when the step did not park.
	Parked []ParkedCall
}

// ParkedCall is one call a parked step waits for.
type ParkedCall struct {
	Call    Call
	CallSeq int64
	// Kind is eventlog.ParkApproval (its ask is committed) or eventlog.ParkClient (its
	// tool/call is; the client runs it).
	Kind string
	// TimeoutMs bounds a client call's wait (the tool's timeout, E2); 0: none.
	TimeoutMs int
}

// ClientClassifier is an optional extension of Pipeline: IsClient reports whether a call is of
// a client-executed tool. The scheduler gives a run of such calls a group of their own (SCHED-2),
// so that a step parks on them with no server body in flight.
type ClientClassifier interface {
	IsClient(in registry.Input) bool
}

// RunStep runs calls, the tool calls of one logged assistant message in model order, and reports
// every event through em (see Emitter for the calling discipline). ctx is the step signal: cancel
// it to abort the step. RunStep returns only when every started body has settled and every started
// call has been committed, so it never leaves a goroutine behind.
//
// The error is non-nil only for an internal failure (SCHED-7): an emitter error, a pipeline
// contract violation, an invalid cap or a bug in the scheduler. Tool failures and aborts are not
// errors; they are results. The Outcome is valid in both cases.
func (s *Scheduler) RunStep(ctx context.Context, step Step, calls []Call, em Emitter) (Outcome, error) {
	r := newRun(s, ctx, step, calls, em)
	r.exec()
	return r.out, r.err
}
