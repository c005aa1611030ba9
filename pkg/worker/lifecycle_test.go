package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/worker"
)

// TestLOOP7_OldCancelsAreNotReplayedIntoANewTurn: a session cancelled once runs its next turn on
// a fresh replica; a message posted during that turn wakes the cancel watcher, which must not
// deliver the old cancel.
func TestLOOP7_OldCancelsAreNotReplayedIntoANewTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.replica(10 * time.Second)
	sid := e.session()
	ctx := context.Background()
	post(t, a, e.tenant, sid, `tool:sleep args:{"ms":60000,"text":"z"}`, worker.ModeFollowup)
	e.waitFor(a.hub, sid, eventlog.TypeToolCall)
	if ok, err := a.svc.Cancel(ctx, e.tenant, sid, false); err != nil || !ok {
		t.Fatal(ok, err)
	}
	e.waitTurnEnds(a.hub, sid, 1, 20*time.Second)
	e.waitReleased(sid)
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := a.svc.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	b := e.replica(10 * time.Second)
	post(t, b, e.tenant, sid, `tool:sleep args:{"ms":1000,"text":"y"}`, worker.ModeFollowup)
	eventually(t, 20*time.Second, func() bool { return count(e.events(sid), eventlog.TypeToolCall) >= 2 })
	post(t, b, e.tenant, sid, "injected", worker.ModeInject) // wakes the watcher
	evs := e.waitTurnEnds(b.hub, sid, 2, 20*time.Second)
	if got := reasons(t, evs); got[1] != eventlog.EndCompleted {
		t.Fatalf("reasons %v: an old agent/cancel was replayed into the new turn", got)
	}
}

// TestStopStartsNoQueuedTurn: stopping a replica aborts its running turn (disposed) and starts no
// other; the queued followup is left, with the lease free, to another replica.
func TestStopStartsNoQueuedTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.replica(10 * time.Second)
	sid := e.session()
	ctx := context.Background()
	post(t, a, e.tenant, sid, `tool:sleep args:{"ms":60000,"text":"z"}`, worker.ModeFollowup)
	e.waitFor(a.hub, sid, eventlog.TypeToolCall)
	post(t, a, e.tenant, sid, "text", worker.ModeFollowup)
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := a.svc.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	evs := e.events(sid)
	if n := count(evs, eventlog.TypeTurnStart); n != 1 || reasons(t, evs)[0] != eventlog.EndAborted {
		t.Fatalf("%d turns %v after Stop; want the running one aborted and no other", n, reasons(t, evs))
	}
	if h, err := e.store.SessionHead(ctx, e.tenant, sid); err != nil || h.Lease.Owner != "" || h.Inbox.NextTurn != 1 {
		t.Fatalf("head after Stop %+v %v; want the lease free and the followup waiting", h, err)
	}
	b := e.replica(10 * time.Second)
	if got := reasons(t, e.waitTurnEnds(b.hub, sid, 2, 20*time.Second)); got[1] != eventlog.EndCompleted {
		t.Fatalf("reasons %v", got)
	}
}

// TestTenantTurnCap: with MaxTenantTurns 1, a tenant's second session waits until its first turn
// has ended; another tenant is not affected (each tenant has its own count).
func TestTenantTurnCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.replicaWith(10*time.Second, func(c *worker.Config) { c.MaxTenantTurns = 1 })
	wantOneTurnAtATime(t, e, r)
}

// wantOneTurnAtATime runs a turn in one session of the tenant and posts to a second session
// while the first runs, and fails unless the second turn started after the first one ended.
func wantOneTurnAtATime(t *testing.T, e *env, r *replica) {
	t.Helper()
	first, second := e.session(), e.session()
	post(t, r, e.tenant, first, `tool:sleep args:{"ms":800,"text":"z"}`, worker.ModeFollowup)
	e.waitFor(r.hub, first, eventlog.TypeToolCall)
	post(t, r, e.tenant, second, "text", worker.ModeFollowup)
	a := e.waitTurnEnds(r.hub, first, 1, 20*time.Second)
	b := e.waitTurnEnds(r.hub, second, 1, 20*time.Second)
	var firstEnd, secondStart int64
	for _, ev := range a {
		if ev.Type == eventlog.TypeTurnEnd {
			firstEnd = ev.Time
		}
	}
	for _, ev := range b {
		if ev.Type == eventlog.TypeTurnStart {
			secondStart = ev.Time
		}
	}
	if secondStart < firstEnd {
		t.Fatalf("the second session's turn started at %d, before the first one ended at %d", secondStart, firstEnd)
	}
}

// TestSweeperRepairsADeadReplicasTurnWithoutANewMessage: a replica died mid-turn holding the
// lease; nobody posts again. The sweeper finds the expired lease and a worker closes the turn
// (SES-14: interrupted, TOOL_OUTCOME_UNKNOWN for the started call) and frees the lease.
func TestSweeperRepairsADeadReplicasTurnWithoutANewMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.session()
	ctx := context.Background()
	dead := uuid.New()
	if ok, _, err := e.store.LeaseAcquire(ctx, e.tenant, sid, dead, 300*time.Millisecond); err != nil || !ok {
		t.Fatal(ok, err)
	}
	am := llm.Message{ID: "m1", Role: llm.RoleAssistant, Content: []llm.Block{llm.ToolCallBlock("c1", "echo", `{"text":"x"}`)},
		Source: llm.Source{Kind: llm.SourceModel, Provider: "scripted", Model: "scripted-1"}}
	if _, err := e.store.Journal(nil, e.tenant, sid, dead).Append(ctx, eventlog.Batch(
		eventlog.NewEvent{Type: "turn/start", Data: map[string]int{"turn": 1}},
		eventlog.NewEvent{Type: "step/start", Data: map[string]int{"turn": 1, "step": 1}},
		eventlog.NewEvent{Type: "assistant/message", Data: map[string]any{"turn": 1, "step": 1, "message": am},
			SurfaceOp: eventlog.Append, SourceEventSeqs: []int64{}},
		eventlog.NewEvent{Type: "tool/call", Data: map[string]any{"turn": 1, "step": 1, "callId": "c1", "name": "echo", "arguments": `{"text":"x"}`}},
	)); err != nil {
		t.Fatal(err)
	}
	r := e.replica(time.Second)
	evs := e.waitTurnEnds(r.hub, sid, 1, 30*time.Second)
	if got := reasons(t, evs); got[0] != eventlog.EndInterrupted {
		t.Fatalf("reasons %v", got)
	}
	if err := eventlog.CheckInvariants(evs); err != nil {
		t.Fatal(err)
	}
	e.waitReleased(sid)
}
