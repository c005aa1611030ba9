package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/approval"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/pgstore"
)

// Parked turns (extension E6): a turn that waits only on an approval answer or a client's result
// commits turn/parked and gives up its lease (serveWith, park). Every answer is appended with the
// session's wake in one transaction (answer), so the next serve, on any replica, resumes the
// turn; a deadline job decides a wait nobody answered in time (runDeadline).

// MaxClientResultBytes bounds the JSON of a client-executed call's result content (PostToolResult).
const MaxClientResultBytes = 1 << 20

// deadlineReason is the reason of an approval decided cancelled at its park deadline.
const deadlineReason = "no answer before the approval's timeout"

// AnswerApproval records a person's decision on approval approvalID of the session, exactly once,
// and wakes the session in the same transaction, so that a parked turn waiting for it resumes
// (a running turn's holder gets it through its watch, as for approval.Answer). outcome is
// allowed-once or rejected and reason at most 4096 bytes (fault.Invalid); an approval the session
// never asked is approval.ErrNotPending, one already decided (answered, timed out, or its turn
// ended) approval.ErrAnswered; an unknown, other tenant's or deleted session ErrNotFound. It
// returns the appended approval/decided.
func (s *Service) AnswerApproval(ctx context.Context, tenantID, sessionID uuid.UUID, approvalID, outcome, reason string) (eventlog.Event, error) {
	if outcome != eventlog.ApprovalAllowedOnce && outcome != eventlog.ApprovalRejected {
		return eventlog.Event{}, fault.New(fault.Invalid, `outcome must be "allowed-once" or "rejected"`)
	}
	if len(reason) > 4096 {
		return eventlog.Event{}, fault.New(fault.Invalid, "reason must be at most 4096 bytes")
	}
	check := func(ctx context.Context, r pgstore.EventReader) error { return approvalPending(ctx, r, approvalID) }
	return s.answer(ctx, tenantID, sessionID, check,
		eventlog.Of(eventlog.ApprovalDecided{ID: approvalID, Outcome: outcome, Reason: reason}))
}

// approvalPending answers nil when approval id was asked and not decided, else ErrAnswered or
// ErrNotPending (as approval.Answer does).
func approvalPending(ctx context.Context, r pgstore.EventReader, id string) error {
	evs, err := r.Approval(ctx, id)
	if err != nil {
		return err
	}
	if _, done := approval.Decision(evs, id); done {
		return approval.ErrAnswered
	}
	for _, a := range approval.Pending(evs) {
		if a.ID == id {
			return nil
		}
	}
	return approval.ErrNotPending
}

// PostToolResult records the client's result of a client-executed call of the session's parked
// turn and wakes the session in the same transaction. r.CallID must name a client wait of the
// parked turn that has no result yet: otherwise fault.NotFound ("no client-executed call <id>
// waits for a result in this session"), or fault.Conflict ("call <id> already has a result")
// when it has one. A result that is timed out (only a deadline writes those), fails validation,
// or whose content is over MaxClientResultBytes of JSON is fault.Invalid; an unknown, other
// tenant's or deleted session ErrNotFound. It returns the appended tool/client-result.
func (s *Service) PostToolResult(ctx context.Context, tenantID, sessionID uuid.UUID, r eventlog.ClientResult) (eventlog.Event, error) {
	if r.TimedOut {
		return eventlog.Event{}, fault.New(fault.Invalid, "timedOut is set by the call's deadline, not by a client")
	}
	if err := r.Validate(); err != nil {
		return eventlog.Event{}, fault.New(fault.Invalid, "%s", err.Error())
	}
	if b, err := json.Marshal(r.Content); err != nil || len(b) > MaxClientResultBytes {
		return eventlog.Event{}, fault.New(fault.Invalid, "content must be at most %d bytes of JSON", MaxClientResultBytes)
	}
	check := func(ctx context.Context, er pgstore.EventReader) error {
		evs, err := readPark(ctx, er)
		if err != nil {
			return err
		}
		if _, done := eventlog.ClientResultOf(evs, r.CallID); done {
			return &fault.Error{Code: fault.Conflict, Message: fmt.Sprintf("call %s already has a result", r.CallID)}
		}
		if p, ok := eventlog.Parked(evs); ok && waits(p, eventlog.ParkClient, r.CallID) {
			return nil
		}
		return &fault.Error{Code: fault.NotFound, Message: fmt.Sprintf("no client-executed call %s waits for a result in this session", r.CallID)}
	}
	return s.answer(ctx, tenantID, sessionID, check, eventlog.NewEvent{Type: r.Type(), Data: r, Ignorable: true})
}

// waits reports whether p has an open wait of kind for id (the call id of a client wait, the
// approval id of an approval wait), deadlineMs aside.
func waits(p eventlog.Park, kind, id string) bool {
	_, ok := openWait(p, kind, id)
	return ok
}

// openWait returns p's open wait of kind for id (see waits).
func openWait(p eventlog.Park, kind, id string) (eventlog.ParkWait, bool) {
	for _, w := range p.Open() {
		if w.Kind == kind && (kind == eventlog.ParkClient && w.CallID == id || kind == eventlog.ParkApproval && w.ApprovalID == id) {
			return w, true
		}
	}
	return eventlog.ParkWait{}, false
}

// answer appends ev, after check passes under the post's lock, and wakes the session in the same
// transaction (pgstore.Store.Post with Queue): an answer is never accepted without work scheduled
// for it. A live lease's holder is told through run_wake (it serves again before it parks or
// releases); a free lease gets the session's wake job.
func (s *Service) answer(ctx context.Context, tenantID, sessionID uuid.UUID, check func(context.Context, pgstore.EventReader) error, ev eventlog.NewEvent) (eventlog.Event, error) {
	out, err := s.cfg.Store.Post(ctx, pgstore.PostParams{Tenant: tenantID, Session: sessionID, Queue: s.queue, Prepare: check,
		Build: func(eventlog.Head) ([]eventlog.NewEvent, error) { return []eventlog.NewEvent{ev}, nil }})
	if err != nil {
		return eventlog.Event{}, err
	}
	return out.Events[0], nil
}

// parkAnswers are the kinds eventlog.Parked reads after a turn/parked (the answers and cancels),
// parkEnds the kinds that end a park.
var (
	parkAnswers = []string{eventlog.TypeApprovalDecided, eventlog.TypeClientResult, eventlog.TypeAgentCancel}
	parkEnds    = []string{eventlog.TypeTurnResumed, eventlog.TypeTurnStart, eventlog.TypeTurnEnd}
)

// readPark reads, under the post's lock, what eventlog.Parked needs of the session's last park:
// its turn/parked, the answers and cancels since the loop instance that parked began (its
// turn/start or turn/resumed: an answer appended while the runner was writing the park counts
// too), and the first event that ended the park, if any, in seq order (none when the session
// never parked). Its cost is the answers of the parking loop instance and of its park, not the
// log before or after them.
func readPark(ctx context.Context, r pgstore.EventReader) ([]eventlog.Event, error) {
	last, ok, err := r.Last(ctx, eventlog.TypeTurnParked)
	if err != nil || !ok {
		return nil, err
	}
	ends, err := r.Since(ctx, last.Seq, parkEnds, 1)
	if err != nil {
		return nil, err
	}
	from := last.Seq
	if len(ends) == 0 { // still parked: the last turn/start or turn/resumed is before the park
		from = -1
		for _, typ := range []string{eventlog.TypeTurnStart, eventlog.TypeTurnResumed} {
			ev, ok, err := r.Last(ctx, typ)
			if err != nil {
				return nil, err
			}
			if ok {
				from = max(from, ev.Seq)
			}
		}
	}
	answers, err := r.Since(ctx, from, parkAnswers, 0)
	if err != nil {
		return nil, err
	}
	evs := slices.Concat([]eventlog.Event{last}, answers, ends)
	slices.SortFunc(evs, func(a, b eventlog.Event) int { return int(a.Seq - b.Seq) })
	return evs, nil
}

// runDeadline runs a deadline job (pgstore.ParkDeadline): when its wait is still open in the
// session's parked turn, with the job's deadline, it decides it and wakes the session in one
// transaction, as answers are posted: an approval cancelled, a client call timed out. A wait
// answered, a turn resumed or ended, a deadline moved later, or a deleted session: nothing is
// appended, and the job succeeds. A park that can resume (answered or cancelled by a writer that
// did not wake the session) is woken all the same, so that it never stays parked for good.
func (s *Service) runDeadline(ctx context.Context, d pgstore.ParkDeadline) error {
	w := d.Wait
	id, ev := w.CallID, eventlog.NewEvent{Type: eventlog.TypeClientResult, Ignorable: true,
		Data: eventlog.ClientResult{CallID: w.CallID, TimedOut: true}}
	if w.Kind == eventlog.ParkApproval {
		id, ev = w.ApprovalID, eventlog.Of(eventlog.ApprovalDecided{ID: w.ApprovalID, Outcome: eventlog.ApprovalCancelled, Reason: deadlineReason})
	}
	var decide, resumable bool
	check := func(ctx context.Context, r pgstore.EventReader) error {
		evs, err := readPark(ctx, r)
		if err != nil {
			return err
		}
		p, ok := eventlog.Parked(evs)
		resumable = ok && p.Resolvable()
		if !ok || p.Cancel != nil {
			return nil
		}
		open, ok := openWait(p, w.Kind, id)
		if !ok || open.DeadlineMs <= 0 || open.DeadlineMs > w.DeadlineMs {
			return nil
		}
		if w.Kind == eventlog.ParkApproval {
			err := approvalPending(ctx, r, id)
			if errors.Is(err, approval.ErrAnswered) || errors.Is(err, approval.ErrNotPending) {
				return nil
			}
			if err != nil {
				return err
			}
		}
		decide = true
		return nil
	}
	_, err := s.cfg.Store.Post(ctx, pgstore.PostParams{Tenant: d.TenantID, Session: d.SessionID, Queue: s.queue,
		Prepare: check, WakeIf: func() bool { return decide || resumable },
		Build: func(eventlog.Head) ([]eventlog.NewEvent, error) {
			if !decide {
				return nil, nil
			}
			return []eventlog.NewEvent{ev}, nil
		}})
	if errors.Is(err, eventlog.ErrNotFound) {
		return nil
	}
	return err
}

// parkDeadlines returns the deadline jobs of p's open waits that have a deadline.
func parkDeadlines(a TurnArgs, p eventlog.Park) []pgstore.ParkDeadline {
	var out []pgstore.ParkDeadline
	for _, w := range p.Open() {
		if w.DeadlineMs > 0 {
			out = append(out, pgstore.ParkDeadline{TenantID: a.TenantID, SessionID: a.SessionID, Wait: w})
		}
	}
	return out
}

// errNotResumed is a serve whose runner left a resolvable park as it was: serving again would
// spin.
var errNotResumed = errors.New("worker: the runner did not resume a parked turn that can resume")

// park handles a serve whose runner's view ends with a parked turn p. A park that can resume
// (every wait answered, or cancelled) is served again with the lease held (again true), unless
// the serve that should have resumed it left it as it was (resumed is the seq of the park the
// last serve was asked to resume; errNotResumed). One that cannot gives up the lease and
// schedules its deadline jobs (pgstore.Queue.LeasePark: parked true), or, when an answer came in
// while the lease was still held (run_wake), keeps the lease to serve again (again true).
func (w *turnWorker) park(ctx context.Context, a TurnArgs, owner uuid.UUID, p eventlog.Park, resumed *int64) (parked, again bool, _ error) {
	if p.Resolvable() {
		if *resumed == p.Seq {
			return false, false, errNotResumed
		}
		*resumed = p.Seq
		return false, true, nil
	}
	cfg := w.s.cfg
	ok, err := w.s.queue.LeasePark(context.WithoutCancel(ctx), cfg.Store, a.TenantID, a.SessionID, owner, parkDeadlines(a, p))
	if err != nil {
		return false, false, err
	}
	return ok, !ok, nil
}

// leaveStopping gives up the lease of a serve the replica's Stop interrupted. A turn left parked
// (served cleanly) is parked as always, with its deadline jobs, or handed over with a wake when
// it can resume or an answer came meanwhile (pgstore.Queue.LeaseHandOver): no replica would wake
// it otherwise. Any other session's lease is dropped with a wake when something waits.
func (w *turnWorker) leaveStopping(ctx context.Context, a TurnArgs, owner uuid.UUID, r *agentloop.Runner, clean bool) {
	ctx, cfg := context.WithoutCancel(ctx), w.s.cfg
	p, ok := r.Parked()
	if !clean || !ok {
		_ = w.s.queue.LeaseDrop(ctx, cfg.Store, a.TenantID, a.SessionID, owner)
		return
	}
	if !p.Resolvable() {
		parked, err := w.s.queue.LeasePark(ctx, cfg.Store, a.TenantID, a.SessionID, owner, parkDeadlines(a, p))
		if parked || err != nil {
			return
		}
	}
	_ = w.s.queue.LeaseHandOver(ctx, cfg.Store, a.TenantID, a.SessionID, owner)
}
