// Package approval resolves the `ask` decisions of tool calls through the session log (APR
// rules, extension E1, docs/rules.md): an ask commits `approval/asked` (without the call's
// arguments, APR-3; the call's `tool/call` has them) while the call waits, a person answers over HTTP on any replica, which commits
// `approval/decided`, and the waiting call takes the decision when the replica running its turn
// sees it (Deliver). An unanswered ask is decided `cancelled` after its timeout, and when the turn
// is cancelled; crash repair decides the asks of an interrupted turn `cancelled`. A decision is
// written once: whoever writes second finds the first.
package approval

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/telemetry"
)

// DefaultTimeout is how long an ask waits for an answer when Config.TimeoutFunc gives none.
const DefaultTimeout = 5 * time.Minute

// Config configures a Service. The zero value is valid.
type Config struct {
	// TimeoutFunc returns how long an ask of the agent (session) waits for an answer before it
	// is decided `cancelled` (the preset's approval.timeoutMs), for a request without a Timeout
	// of its own (pkg/agents fills it). Nil or a non-positive result: DefaultTimeout.
	TimeoutFunc func(agent string) time.Duration
	// NewID returns approval ids. Default: random UUIDs.
	NewID func() string
	// Metrics counts the asks waiting on this replica (dshd_approvals_pending); nil: none.
	Metrics *telemetry.Metrics
	// PolicyFunc returns the approval policy in force for the agent (session) from its log as
	// the turn's runner has read it: its last `approval/policy` event, else the preset's
	// approval.policy (Effective). An `approval/policy` among the running turn's events wins
	// over it, and a request's Policy (pkg/agents fills it) over PolicyFunc. Nil or an invalid
	// result: ask.
	PolicyFunc func(agent string) string
}

// Service is the approval service of one replica. It is safe for concurrent use.
type Service struct {
	cfg   Config
	mu    sync.Mutex
	waits map[string]chan eventlog.ApprovalDecided // by approval id, the asks waiting here
}

// New returns a Service.
func New(cfg Config) *Service {
	if cfg.NewID == nil {
		cfg.NewID = uuid.NewString
	}
	return &Service{cfg: cfg, waits: map[string]chan eventlog.ApprovalDecided{}}
}

// ErrNoTurn is the failure of an ask outside a session's turn (APR-2): nothing is appended.
var ErrNoTurn = errors.New("approval: the call runs outside a session turn; an approval needs one")

// Approve implements registry.Approver (APR-1, APR-3, APR-4): under the policy in force when
// the ask is written (policy) it decides `rejected` at once when that is never, asking nobody
// and writing nothing (`cancelled` when the call is already cancelled); otherwise it commits
// `approval/asked`, waits for the decision, the timeout or the call's cancellation, and returns
// the outcome. Every ask is asked anew: an allowed-once covers its one call (APR-5).
func (s *Service) Approve(ctx context.Context, req registry.ApprovalRequest) (string, error) {
	exec := req.Exec
	if exec == nil || exec.Recorder() == nil {
		return "", ErrNoTurn
	}
	if req.Park && exec.Parent == nil {
		return s.approveParked(ctx, req)
	}
	id := s.cfg.NewID()
	ch := s.register(id)
	defer s.unregister(id)
	// The reference's shape (APR-3): no arguments; the approvals endpoint reads them from the
	// call's tool/call.
	asked := eventlog.ApprovalAsked{ID: id, ToolName: req.ToolName, CallID: req.CallID, Reason: req.Reason}
	never := false
	err := exec.Recorder().CommitFunc(context.WithoutCancel(ctx), func(turn []eventlog.Event) ([]eventlog.NewEvent, error) {
		never = s.policy(req, turn) == PolicyNever
		if never {
			return nil, nil
		}
		return []eventlog.NewEvent{eventlog.Of(asked)}, nil
	})
	if err != nil {
		return "", fmt.Errorf("approval: ask: %w", err)
	}
	if never {
		if ctx.Err() != nil {
			return eventlog.ApprovalCancelled, nil
		}
		return eventlog.ApprovalRejected, nil
	}
	s.cfg.Metrics.ApprovalWaiting(1)
	defer s.cfg.Metrics.ApprovalWaiting(-1)
	timer := time.NewTimer(s.timeout(req))
	defer timer.Stop()
	var why string
	select {
	case d := <-ch:
		return outcomeOf(d)
	case <-timer.C:
		why = "no answer before the approval's timeout"
	case <-ctx.Done():
		why = "the call was cancelled"
	}
	return s.decide(ctx, exec, id, why)
}

// decide writes `approval/decided {cancelled}` for id unless a decision is already in the turn
// (an answer that arrived meanwhile), and returns the outcome in force.
func (s *Service) decide(ctx context.Context, exec *registry.Execution, id, why string) (string, error) {
	outcome := eventlog.ApprovalCancelled
	err := exec.Recorder().CommitFunc(context.WithoutCancel(ctx), func(turn []eventlog.Event) ([]eventlog.NewEvent, error) {
		if d, ok := Decision(turn, id); ok {
			outcome = d.Outcome
			return nil, nil
		}
		outcome = eventlog.ApprovalCancelled
		return []eventlog.NewEvent{eventlog.Of(eventlog.ApprovalDecided{ID: id, Outcome: outcome, Reason: why})}, nil
	})
	if err != nil {
		return "", fmt.Errorf("approval: decide: %w", err)
	}
	return outcomeOf(eventlog.ApprovalDecided{ID: id, Outcome: outcome})
}

// outcomeOf returns the outcome of a decision, or, for one that is none of the four (written by
// another writer: the API takes allowed-once and rejected only), the approver's failure, so the
// call ends with a final failure and nothing runs (APR-1, PIPE-6): there is no grant but
// allowed-once, for one call (APR-5).
func outcomeOf(d eventlog.ApprovalDecided) (string, error) {
	switch d.Outcome {
	case eventlog.ApprovalAllowedOnce, eventlog.ApprovalRejected, eventlog.ApprovalCancelled, eventlog.ApprovalUnavailable:
		return d.Outcome, nil
	}
	return "", fmt.Errorf("approval: approval %s was decided %q, which is not an outcome", d.ID, d.Outcome)
}

// policy is the policy in force for an ask of agent, given the committed events of its
// running turn: the last `approval/policy` among them, else the request's (req.Policy), else
// PolicyFunc's.
func (s *Service) policy(req registry.ApprovalRequest, turn []eventlog.Event) string {
	if p, ok := LoggedPolicy(turn); ok {
		return p
	}
	if req.Policy != "" {
		return Effective(req.Policy, "")
	}
	if s.cfg.PolicyFunc != nil {
		return Effective(s.cfg.PolicyFunc(req.Agent), "")
	}
	return PolicyAsk
}

// approveParked is Approve for a call that may park: the first time it commits the ask
// (under the policy in force, as the blocking path) and returns registry.ErrParked; when the
// parked turn is resumed it finds its ask among the turn's events and returns the logged
// decision, or, with none (the resume is a cancel), decides `cancelled` and returns that.
func (s *Service) approveParked(ctx context.Context, req registry.ApprovalRequest) (string, error) {
	exec := req.Exec
	var (
		outcome string
		parked  bool
	)
	err := exec.Recorder().CommitFunc(context.WithoutCancel(ctx), func(turn []eventlog.Event) ([]eventlog.NewEvent, error) {
		outcome, parked = "", false
		if a, ok := AskOf(turn, req.CallID); ok {
			if d, ok := Decision(turn, a.ID); ok {
				outcome = d.Outcome
				return nil, nil
			}
			outcome = eventlog.ApprovalCancelled
			return []eventlog.NewEvent{eventlog.Of(eventlog.ApprovalDecided{ID: a.ID, Outcome: outcome, Reason: "the turn was cancelled"})}, nil
		}
		if s.policy(req, turn) == PolicyNever {
			outcome = eventlog.ApprovalRejected
			if ctx.Err() != nil {
				outcome = eventlog.ApprovalCancelled
			}
			return nil, nil
		}
		parked = true
		return []eventlog.NewEvent{eventlog.Of(eventlog.ApprovalAsked{ID: s.cfg.NewID(), ToolName: req.ToolName, CallID: req.CallID, Reason: req.Reason})}, nil
	})
	if err != nil {
		return "", fmt.Errorf("approval: ask: %w", err)
	}
	if parked {
		return "", registry.ErrParked
	}
	return outcomeOf(eventlog.ApprovalDecided{Outcome: outcome})
}

// AskOf returns the last approval/asked of call callID among evs.
func AskOf(evs []eventlog.Event, callID string) (eventlog.ApprovalAsked, bool) {
	var out eventlog.ApprovalAsked
	found := false
	for _, ev := range evs {
		if ev.Type != eventlog.TypeApprovalAsked {
			continue
		}
		if a, err := eventlog.Decode[eventlog.ApprovalAsked](ev); err == nil && a.CallID == callID {
			out, found = a, true
		}
	}
	return out, found
}

// Timeout returns how long an ask of agent waits for its answer (a parked ask's deadline):
// TimeoutFunc's, else DefaultTimeout. A request's own Timeout (filled by pkg/agents) is not
// seen here: a caller holding the request reads req.Timeout first (timeout does).
func (s *Service) Timeout(agent string) time.Duration {
	return s.timeout(registry.ApprovalRequest{Agent: agent})
}

// timeout is how long an ask waits: the request's (req.Timeout), else TimeoutFunc's, else
// DefaultTimeout.
func (s *Service) timeout(req registry.ApprovalRequest) time.Duration {
	if req.Timeout > 0 {
		return req.Timeout
	}
	if s.cfg.TimeoutFunc != nil {
		if d := s.cfg.TimeoutFunc(req.Agent); d > 0 {
			return d
		}
	}
	return DefaultTimeout
}

func (s *Service) register(id string) chan eventlog.ApprovalDecided {
	ch := make(chan eventlog.ApprovalDecided, 1)
	s.mu.Lock()
	s.waits[id] = ch
	s.mu.Unlock()
	return ch
}

func (s *Service) unregister(id string) {
	s.mu.Lock()
	delete(s.waits, id)
	s.mu.Unlock()
}

// Deliver hands a committed decision to the call waiting for it on this replica, if any (the
// worker follows the log of the sessions it runs and calls Deliver for every approval/decided).
// It never blocks.
func (s *Service) Deliver(d eventlog.ApprovalDecided) {
	s.mu.Lock()
	ch := s.waits[d.ID]
	s.mu.Unlock()
	if ch != nil {
		select {
		case ch <- d:
		default:
		}
	}
}

// Decision returns the first approval/decided of id among evs.
func Decision(evs []eventlog.Event, id string) (eventlog.ApprovalDecided, bool) {
	for _, ev := range evs {
		if ev.Type != eventlog.TypeApprovalDecided {
			continue
		}
		if d, err := eventlog.Decode[eventlog.ApprovalDecided](ev); err == nil && d.ID == id {
			return d, true
		}
	}
	return eventlog.ApprovalDecided{}, false
}

// Pending returns the approvals of evs (a log, or a suffix of it) that were asked and not
// decided, in the order they were asked.
func Pending(evs []eventlog.Event) []eventlog.ApprovalAsked {
	var out []eventlog.ApprovalAsked
	for _, ev := range evs {
		switch ev.Type {
		case eventlog.TypeApprovalAsked:
			if a, err := eventlog.Decode[eventlog.ApprovalAsked](ev); err == nil {
				out = append(out, a)
			}
		case eventlog.TypeApprovalDecided:
			if d, err := eventlog.Decode[eventlog.ApprovalDecided](ev); err == nil {
				for i, a := range out {
					if a.ID == d.ID {
						out = append(out[:i], out[i+1:]...)
						break
					}
				}
			}
		}
	}
	return out
}

// Errors of Answer.
var (
	ErrNotPending = &fault.Error{Code: fault.NotFound, Message: "no such pending approval in this session"}
	ErrAnswered   = &fault.Error{Code: fault.Conflict, Message: "the approval was already decided"}
)

// ReadFunc returns the session's approval events (asked and decided, in order; any other events
// may be among them) and the seq the log ended at when they were read (read it first).
type ReadFunc func(ctx context.Context) (evs []eventlog.Event, last int64, err error)

// Answer records a person's decision on approval id of the session behind j (an unfenced
// journal; any replica): outcome is allowed-once or rejected. It answers exactly once: a second
// answer, or one after the timeout, fails with ErrAnswered; an unknown id with ErrNotPending. The
// decision is appended only if the log has not moved since read saw it (else it reads again).
func Answer(ctx context.Context, j eventlog.Journal, read ReadFunc, id, outcome, reason string) (eventlog.Event, error) {
	if outcome != eventlog.ApprovalAllowedOnce && outcome != eventlog.ApprovalRejected {
		return eventlog.Event{}, fault.New(fault.Invalid, `outcome must be "allowed-once" or "rejected"`)
	}
	if len(reason) > 4096 {
		return eventlog.Event{}, fault.New(fault.Invalid, "reason must be at most 4096 bytes")
	}
	for attempt := 0; attempt < 8; attempt++ {
		evs, last, err := read(ctx)
		if err != nil {
			return eventlog.Event{}, err
		}
		if _, done := Decision(evs, id); done {
			return eventlog.Event{}, ErrAnswered
		}
		asked := false
		for _, a := range Pending(evs) {
			asked = asked || a.ID == id
		}
		if !asked {
			return eventlog.Event{}, ErrNotPending
		}
		out, err := j.Append(ctx, func(h eventlog.Head) ([]eventlog.NewEvent, error) {
			if h.Last() != last {
				return nil, eventlog.ErrStale
			}
			return []eventlog.NewEvent{eventlog.Of(eventlog.ApprovalDecided{ID: id, Outcome: outcome, Reason: reason})}, nil
		})
		if errors.Is(err, eventlog.ErrStale) {
			continue
		}
		if err != nil {
			return eventlog.Event{}, err
		}
		return out[0], nil
	}
	return eventlog.Event{}, fault.New(fault.Conflict, "the session kept moving; answer again")
}
