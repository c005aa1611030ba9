package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/approval"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/worker"
)

// parkedSession returns a session whose first turn parked in its first step waiting for waits,
// written as a runner would have left it (an approval/asked for every approval wait) and holding
// no lease.
func (e *env) parkedSession(waits ...eventlog.ParkWait) uuid.UUID {
	e.t.Helper()
	return e.parkedSessionWith(nil, waits...)
}

// parkedSessionWith is parkedSession with before appended just before the turn/parked (answers
// that came while the runner was writing the park).
func (e *env) parkedSessionWith(before []eventlog.NewEvent, waits ...eventlog.ParkWait) uuid.UUID {
	e.t.Helper()
	sid := e.session()
	var calls []llm.Block
	for _, w := range waits {
		calls = append(calls, llm.ToolCallBlock(w.CallID, w.ToolName, `{}`))
	}
	am := llm.Message{ID: "m1", Role: llm.RoleAssistant, Content: calls,
		Source: llm.Source{Kind: llm.SourceModel, Provider: "scripted", Model: "scripted-1"}}
	evs := []eventlog.NewEvent{
		{Type: eventlog.TypeTurnStart, Data: eventlog.TurnStart{Turn: 1}},
		{Type: eventlog.TypeStepStart, Data: eventlog.StepStart{Turn: 1, Step: 1}},
		{Type: eventlog.TypeUserMessage, Data: llm.NewUserMessage("u0", "park"), SurfaceOp: eventlog.Append},
		{Type: eventlog.TypeAssistantMessage, Data: map[string]any{"turn": 1, "step": 1, "message": am},
			SurfaceOp: eventlog.Append, SourceEventSeqs: []int64{}},
	}
	reason := eventlog.ParkClient
	for _, w := range waits {
		if w.Kind == eventlog.ParkApproval {
			reason = eventlog.ParkApproval
			evs = append(evs, eventlog.Of(eventlog.ApprovalAsked{ID: w.ApprovalID, ToolName: w.ToolName, CallID: w.CallID}))
		}
	}
	evs = append(evs, before...)
	evs = append(evs, eventlog.NewEvent{Type: eventlog.TypeTurnParked, Ignorable: true,
		Data: eventlog.TurnParked{Turn: 1, Step: 1, Reason: reason, Waits: waits}})
	if _, err := e.store.Journal(nil, e.tenant, sid, uuid.Nil).Append(context.Background(), eventlog.Batch(evs...)); err != nil {
		e.t.Fatal(err)
	}
	return sid
}

// riverJobs counts the session's River jobs of kind in state (any state when empty).
func (e *env) riverJobs(sid uuid.UUID, kind, state string) int {
	e.t.Helper()
	var n int
	err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
		WHERE kind = $1 AND args->>'sessionId' = $2 AND ($3 = '' OR state::text = $3)`, kind, sid.String(), state).Scan(&n)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func clientWait(id string, deadline int64) eventlog.ParkWait {
	return eventlog.ParkWait{Kind: eventlog.ParkClient, CallID: id, ToolName: "pick", DeadlineMs: deadline}
}

func approvalWait(callID, id string, deadline int64) eventlog.ParkWait {
	return eventlog.ParkWait{Kind: eventlog.ParkApproval, CallID: callID, ToolName: "write", ApprovalID: id, DeadlineMs: deadline}
}

func faultCode(err error) string {
	var f *fault.Error
	if errors.As(err, &f) {
		return f.Code
	}
	return ""
}

// faultMessage is the message a client reads of err (problem+json detail).
func faultMessage(err error) string {
	var f *fault.Error
	if errors.As(err, &f) {
		return f.Message
	}
	return ""
}

// TestE6_PostToolResultErrors: a client's result is accepted only for an open client wait of
// the session's parked turn, once, and wakes the session in the same transaction.
func TestE6_PostToolResultErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.replicaWith(10*time.Second, func(c *worker.Config) { c.InsertOnly = true })
	ctx := context.Background()
	idle := e.session()
	if _, err := r.svc.PostToolResult(ctx, e.tenant, idle, eventlog.ClientResult{CallID: "c1"}); faultCode(err) != fault.NotFound {
		t.Fatalf("result to a session that never parked: %v; want not found", err)
	}
	sid := e.parkedSession(clientWait("c1", 0), clientWait("c2", 0))
	_, err := r.svc.PostToolResult(ctx, e.tenant, sid, eventlog.ClientResult{CallID: "c9"})
	if faultCode(err) != fault.NotFound || faultMessage(err) != "no client-executed call c9 waits for a result in this session" {
		t.Fatalf("unknown call: %v", err)
	}
	if _, err := r.svc.PostToolResult(ctx, e.tenant, sid, eventlog.ClientResult{CallID: "c1", TimedOut: true}); faultCode(err) != fault.Invalid {
		t.Fatalf("a client's timed-out result: %v; want invalid", err)
	}
	big := eventlog.ClientResult{CallID: "c1", Content: []llm.Block{llm.TextBlock(strings.Repeat("x", worker.MaxClientResultBytes))}}
	if _, err := r.svc.PostToolResult(ctx, e.tenant, sid, big); faultCode(err) != fault.Invalid {
		t.Fatalf("a result over the size bound: %v; want invalid", err)
	}
	if n := e.riverJobs(sid, "dshd_turn", ""); n != 0 {
		t.Fatalf("refused results enqueued %d wake jobs", n)
	}
	ev, err := r.svc.PostToolResult(ctx, e.tenant, sid, eventlog.ClientResult{CallID: "c1", Content: []llm.Block{llm.TextBlock("blue")}})
	if err != nil || ev.Type != eventlog.TypeClientResult || !ev.Ignorable {
		t.Fatalf("result: %+v, %v", ev, err)
	}
	if n := e.riverJobs(sid, "dshd_turn", ""); n != 1 {
		t.Fatalf("the accepted result enqueued %d wake jobs, want 1", n)
	}
	_, err = r.svc.PostToolResult(ctx, e.tenant, sid, eventlog.ClientResult{CallID: "c1"})
	if faultCode(err) != fault.Conflict || faultMessage(err) != "call c1 already has a result" {
		t.Fatalf("second result: %v; want conflict", err)
	}
	if got := count(e.events(sid), eventlog.TypeClientResult); got != 1 {
		t.Fatalf("%d client results logged, want 1", got)
	}
}

// TestE6_AnswerApprovalWakesAParkedSession: the answer of a parked turn's approval is checked as
// approval.Answer checks it and enqueues the session's wake with the decision.
func TestE6_AnswerApprovalWakesAParkedSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.replicaWith(10*time.Second, func(c *worker.Config) { c.InsertOnly = true })
	ctx := context.Background()
	sid := e.parkedSession(approvalWait("c1", "a1", 0))
	if _, err := r.svc.AnswerApproval(ctx, e.tenant, sid, "a1", "maybe", ""); faultCode(err) != fault.Invalid {
		t.Fatalf("bad outcome: %v", err)
	}
	if _, err := r.svc.AnswerApproval(ctx, e.tenant, sid, "a1", eventlog.ApprovalRejected, strings.Repeat("x", 4097)); faultCode(err) != fault.Invalid {
		t.Fatalf("long reason: %v", err)
	}
	if _, err := r.svc.AnswerApproval(ctx, e.tenant, sid, "a9", eventlog.ApprovalAllowedOnce, ""); !errors.Is(err, approval.ErrNotPending) {
		t.Fatalf("unknown approval: %v", err)
	}
	ev, err := r.svc.AnswerApproval(ctx, e.tenant, sid, "a1", eventlog.ApprovalAllowedOnce, "ok")
	if err != nil || ev.Type != eventlog.TypeApprovalDecided {
		t.Fatalf("answer: %+v, %v", ev, err)
	}
	if n := e.riverJobs(sid, "dshd_turn", ""); n != 1 {
		t.Fatalf("the answer enqueued %d wake jobs, want 1", n)
	}
	if _, err := r.svc.AnswerApproval(ctx, e.tenant, sid, "a1", eventlog.ApprovalRejected, ""); !errors.Is(err, approval.ErrAnswered) {
		t.Fatalf("second answer: %v", err)
	}
	if _, err := r.svc.AnswerApproval(ctx, e.tenant, uuid.New(), "a1", eventlog.ApprovalRejected, ""); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
}

// TestE6_DeadlineJobDecidesOnlyAnOpenWait: a deadline job decides its wait when it is still open
// with the job's deadline (approval cancelled, client call timed out) and does nothing once it
// was answered, when the deadline moved later, or when the session is gone.
func TestE6_DeadlineJobDecidesOnlyAnOpenWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.replicaWith(10*time.Second, func(c *worker.Config) { c.InsertOnly = true })
	ctx := context.Background()
	at := time.Now().UnixMilli()
	a1, c2, c3 := approvalWait("c1", "a1", at), clientWait("c2", at), clientWait("c3", at)
	sid := e.parkedSession(a1, c2, c3)
	job := func(w eventlog.ParkWait) pgstore.ParkDeadline {
		return pgstore.ParkDeadline{TenantID: e.tenant, SessionID: sid, Wait: w}
	}
	early := job(c3)
	early.Wait.DeadlineMs = at - 1 // a job of an earlier park whose deadline this one moved
	for _, d := range []pgstore.ParkDeadline{job(a1), job(c2), job(a1), job(c2), early} {
		if err := r.svc.RunDeadline(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	evs := e.events(sid)
	if count(evs, eventlog.TypeApprovalDecided) != 1 || count(evs, eventlog.TypeClientResult) != 1 {
		t.Fatalf("%d decisions and %d client results, want one each", count(evs, eventlog.TypeApprovalDecided), count(evs, eventlog.TypeClientResult))
	}
	p, ok := eventlog.Parked(evs)
	if !ok || p.Decided["a1"].Outcome != eventlog.ApprovalCancelled || p.Decided["a1"].Reason != "no answer before the approval's timeout" ||
		!p.Results["c2"].TimedOut || len(p.Open()) != 1 {
		t.Fatalf("park after the deadlines: %+v", p)
	}
	if n := e.riverJobs(sid, "dshd_turn", ""); n != 1 {
		t.Fatalf("the deadlines enqueued %d wake jobs, want 1 (one is queued)", n)
	}
	if _, err := r.svc.PostToolResult(ctx, e.tenant, sid, eventlog.ClientResult{CallID: "c3"}); err != nil {
		t.Fatal(err)
	}
	if err := r.svc.RunDeadline(ctx, job(c3)); err != nil || count(e.events(sid), eventlog.TypeClientResult) != 2 {
		t.Fatalf("deadline of an answered call: %v, %d results", err, count(e.events(sid), eventlog.TypeClientResult))
	}
	if err := e.store.SessionDelete(ctx, e.tenant, sid); err != nil {
		t.Fatal(err)
	}
	if err := r.svc.RunDeadline(ctx, job(c3)); err != nil {
		t.Fatalf("deadline of a deleted session: %v", err)
	}
}

// TestE6_AnswerBeforeTheParkCounts: an answer appended while the runner was writing its park
// (after approval/asked, before turn/parked) answers the park: its deadline job decides nothing
// (it only wakes the session, whose park can resume), and the wait's second answer is refused.
func TestE6_AnswerBeforeTheParkCounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.replicaWith(10*time.Second, func(c *worker.Config) { c.InsertOnly = true })
	ctx := context.Background()
	at := time.Now().UnixMilli()
	a1, c2 := approvalWait("c1", "a1", at), clientWait("c2", at)
	sid := e.parkedSessionWith([]eventlog.NewEvent{
		eventlog.Of(eventlog.ApprovalDecided{ID: "a1", Outcome: eventlog.ApprovalAllowedOnce}),
		{Type: eventlog.TypeClientResult, Ignorable: true, Data: eventlog.ClientResult{CallID: "c2"}},
	}, a1, c2)
	for _, w := range []eventlog.ParkWait{a1, c2} {
		if err := r.svc.RunDeadline(ctx, pgstore.ParkDeadline{TenantID: e.tenant, SessionID: sid, Wait: w}); err != nil {
			t.Fatal(err)
		}
	}
	evs := e.events(sid)
	if count(evs, eventlog.TypeApprovalDecided) != 1 || count(evs, eventlog.TypeClientResult) != 1 {
		t.Fatalf("deadlines of answered waits appended: %d decisions, %d results", count(evs, eventlog.TypeApprovalDecided), count(evs, eventlog.TypeClientResult))
	}
	if n := e.riverJobs(sid, "dshd_turn", ""); n != 1 {
		t.Fatalf("the deadlines of a park that can resume enqueued %d wake jobs, want 1", n)
	}
	if _, err := r.svc.AnswerApproval(ctx, e.tenant, sid, "a1", eventlog.ApprovalRejected, ""); !errors.Is(err, approval.ErrAnswered) {
		t.Fatalf("second answer: %v", err)
	}
	if _, err := r.svc.PostToolResult(ctx, e.tenant, sid, eventlog.ClientResult{CallID: "c2"}); faultCode(err) != fault.Conflict {
		t.Fatalf("second result: %v", err)
	}
}

// TestE6_CancelWakesAParkedTurn: a parked turn holds no lease, so its cancel wakes the session
// with the agent/cancel; a cancel of an idle session writes nothing.
func TestE6_CancelWakesAParkedTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.replicaWith(10*time.Second, func(c *worker.Config) { c.InsertOnly = true })
	ctx := context.Background()
	if ok, err := r.svc.Cancel(ctx, e.tenant, e.session(), false); err != nil || ok {
		t.Fatalf("cancel of an idle session: %v %v", ok, err)
	}
	sid := e.parkedSession(clientWait("c1", 0))
	if ok, err := r.svc.Cancel(ctx, e.tenant, sid, false); err != nil || !ok {
		t.Fatalf("cancel of a parked turn: %v %v", ok, err)
	}
	p, ok := eventlog.Parked(e.events(sid))
	if !ok || p.Cancel == nil || !p.Resolvable() {
		t.Fatalf("park after the cancel: %+v %v", p, ok)
	}
	if n := e.riverJobs(sid, "dshd_turn", ""); n != 1 {
		t.Fatalf("the cancel enqueued %d wake jobs, want 1", n)
	}
}

// TestE6_ServedParkGivesUpTheLease: a serve whose runner finds the turn parked with a wait still
// open gives up the lease (no lease held, no turn slot) and schedules the wait's deadline job;
// the job, when the deadline passes, decides the approval cancelled and wakes the session, whose
// serve parks again for the call still open.
func TestE6_ServedParkGivesUpTheLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.replica(10 * time.Second)
	ctx := context.Background()
	sid := e.parkedSession(approvalWait("c1", "a1", 0), approvalWait("c2", "a2", time.Now().Add(500*time.Millisecond).UnixMilli()),
		clientWait("c3", 0))
	if _, err := r.svc.AnswerApproval(ctx, e.tenant, sid, "a1", eventlog.ApprovalAllowedOnce, ""); err != nil {
		t.Fatal(err)
	}
	// The served park schedules a2's deadline job; River runs it once due, which decides a2.
	e.waitFor(r.hub, sid, eventlog.TypeApprovalDecided)
	eventually(t, 30*time.Second, func() bool {
		p, _ := eventlog.Parked(e.events(sid))
		return p.Decided["a2"].Outcome == eventlog.ApprovalCancelled
	})
	eventually(t, 10*time.Second, func() bool {
		return e.riverJobs(sid, "dshd_park_deadline", "completed") == 1 && e.riverJobs(sid, "dshd_turn", "completed") == 2
	})
	e.waitReleased(sid)
	if n, err := e.store.LeasesHeld(ctx, e.tenant); err != nil || n != 0 {
		t.Fatalf("leases held by a parked turn: %d, %v", n, err)
	}
	p, ok := eventlog.Parked(e.events(sid))
	if !ok || len(p.Open()) != 1 || p.Open()[0].CallID != "c3" {
		t.Fatalf("park: %+v %v; want c3 open", p, ok)
	}
}

// askSession returns a session whose preset asks before every echo call.
func (e *env) askSession() uuid.UUID {
	e.t.Helper()
	ctx := context.Background()
	b := preset.Body{Name: "ask", Model: preset.Model{Provider: preset.ProviderScripted, Model: "scripted-1"},
		Approval: preset.Approval{Ask: []string{"echo"}}}
	b.Normalize()
	p, err := e.presets.PresetCreate(ctx, e.tenant, b)
	if err != nil {
		e.t.Fatal(err)
	}
	sess, err := e.store.SessionCreate(ctx, e.tenant, pgstore.SessionParams{PresetID: &p.ID, PresetVersion: p.Version})
	if err != nil {
		e.t.Fatal(err)
	}
	return sess.ID
}

// approvedTurnEnds waits for the session's first turn to end and checks that it completed, with
// resumes resumes and the approved call run.
func (e *env) approvedTurnEnds(hub *pgstore.Hub, sid uuid.UUID, resumes int) {
	e.t.Helper()
	evs := e.waitTurnEnds(hub, sid, 1, 30*time.Second)
	if got := reasons(e.t, evs); got[0] != eventlog.EndCompleted || count(evs, eventlog.TypeTurnResumed) != resumes {
		e.t.Fatalf("reasons %v, %d resumes; want completed with %d", got, count(evs, eventlog.TypeTurnResumed), resumes)
	}
	for _, ev := range evs {
		if ev.Type == eventlog.TypeToolResult && strings.Contains(string(ev.Data), `"error"`) {
			e.t.Fatalf("the approved call failed: %s", ev.Data)
		}
	}
	if err := eventlog.CheckInvariants(evs); err != nil {
		e.t.Fatal(err)
	}
	e.waitReleased(sid)
}

// TestE6_ParkedAskResumesOnTheAnswer: a turn whose call asks for approval parks (turn/parked, no
// lease held, no turn slot), the answer resumes it as a new loop instance (turn/resumed) and the
// turn completes with the call run.
func TestE6_ParkedAskResumesOnTheAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.parking = true
	ctx := context.Background()
	sid := e.askSession()
	r := e.replica(10 * time.Second)
	post(t, r, e.tenant, sid, `tool:echo args:{"text":"x"}`, worker.ModeFollowup)
	e.waitFor(r.hub, sid, eventlog.TypeTurnParked)
	e.waitReleased(sid)
	if n, err := e.store.LeasesHeld(ctx, e.tenant); err != nil || n != 0 {
		t.Fatalf("leases held by a parked turn: %d, %v", n, err)
	}
	park, ok := eventlog.Parked(e.events(sid))
	if !ok || len(park.Open()) != 1 || park.Open()[0].Kind != eventlog.ParkApproval {
		t.Fatalf("park: %+v %v; want one approval wait", park, ok)
	}
	if _, err := r.svc.AnswerApproval(ctx, e.tenant, sid, park.Open()[0].ApprovalID, eventlog.ApprovalAllowedOnce, ""); err != nil {
		t.Fatal(err)
	}
	e.approvedTurnEnds(r.hub, sid, 1)
}

// TestE6_ClientCallResumesOnItsResultOrDeadline: a client-executed call parks its turn; the
// client's result resumes it and becomes the call's tool/result, and a call nobody answers is
// decided timed out by its deadline job, which resumes the turn too.
func TestE6_ClientCallResumesOnItsResultOrDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.parking = true
	ctx := context.Background()
	r := e.replica(10 * time.Second)
	answered, late := e.session(), e.session()
	post(t, r, e.tenant, answered, `tool:pick args:{}`, worker.ModeFollowup)
	post(t, r, e.tenant, late, `tool:pick_fast args:{}`, worker.ModeFollowup)
	e.waitFor(r.hub, answered, eventlog.TypeTurnParked)
	park, ok := eventlog.Parked(e.events(answered))
	if !ok || len(park.Open()) != 1 || park.Open()[0].Kind != eventlog.ParkClient {
		t.Fatalf("park: %+v %v; want one client wait", park, ok)
	}
	e.waitReleased(answered)
	result := eventlog.ClientResult{CallID: park.Open()[0].CallID, Content: []llm.Block{llm.TextBlock("blue")}}
	if _, err := r.svc.PostToolResult(ctx, e.tenant, answered, result); err != nil {
		t.Fatal(err)
	}
	for sid, want := range map[uuid.UUID]string{answered: `blue`, late: fault.CodeToolTimeout} {
		evs := e.waitTurnEnds(r.hub, sid, 1, 30*time.Second)
		if got := reasons(t, evs); got[0] != eventlog.EndCompleted || count(evs, eventlog.TypeTurnResumed) != 1 {
			t.Fatalf("session %s: reasons %v, %d resumes", sid, got, count(evs, eventlog.TypeTurnResumed))
		}
		var res string
		for _, ev := range evs {
			if ev.Type == eventlog.TypeToolResult {
				res = string(ev.Data)
			}
		}
		if !strings.Contains(res, want) {
			t.Fatalf("session %s: tool/result %s, want %s in it", sid, res, want)
		}
		if err := eventlog.CheckInvariants(evs); err != nil {
			t.Fatal(err)
		}
	}
}

// TestE6_CancelEndsAParkedTurn: the cancel of a parked ask wakes the session; the resumed runner
// sees the agent/cancel after turn/parked and ends the turn.
func TestE6_CancelEndsAParkedTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.parking = true
	ctx := context.Background()
	sid := e.askSession()
	r := e.replica(10 * time.Second)
	post(t, r, e.tenant, sid, `tool:echo args:{"text":"x"}`, worker.ModeFollowup)
	e.waitFor(r.hub, sid, eventlog.TypeTurnParked)
	e.waitReleased(sid)
	if ok, err := r.svc.Cancel(ctx, e.tenant, sid, false); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	evs := e.waitTurnEnds(r.hub, sid, 1, 30*time.Second)
	if got := reasons(t, evs); got[0] != eventlog.EndAborted {
		t.Fatalf("reasons %v; want aborted", got)
	}
	if err := eventlog.CheckInvariants(evs); err != nil {
		t.Fatal(err)
	}
	e.waitReleased(sid)
}
