package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dshd/dshd/internal/pgtest"
	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/approval"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/tools/demo"
	"github.com/dshd/dshd/pkg/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// replica is one server's worker side over the shared database.
type replica struct {
	svc   *worker.Service
	hub   *pgstore.Hub
	store *pgstore.Store
}

type env struct {
	t       *testing.T
	pool    *pgxpool.Pool
	store   *pgstore.Store
	presets *pgstore.Presets
	tenant  uuid.UUID
	preset  preset.Preset
	// parking, when set before the first replica, gives the replicas an approval service and the
	// client-executed tools pick and pick_fast, whose calls park their turns (session agents
	// park, extension E6).
	parking bool
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	tn, _, err := pgstore.NewTenants(pool).TenantCreate(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	ps := pgstore.NewPresets(pool, preset.Rules{})
	b := preset.Body{Name: "p", Model: preset.Model{Provider: preset.ProviderScripted, Model: "scripted-1"}}
	b.Normalize()
	p, err := ps.PresetCreate(ctx, tn.ID, b)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, pool: pool, store: pgstore.NewStore(pool, pgstore.StoreConfig{}), presets: ps, tenant: tn.ID, preset: p}
}

func (e *env) replica(ttl time.Duration) *replica {
	e.t.Helper()
	return e.replicaWith(ttl, nil)
}

// replicaWith starts a replica whose worker configuration tweak adjusts.
func (e *env) replicaWith(ttl time.Duration, tweak func(*worker.Config)) *replica {
	e.t.Helper()
	ctx := context.Background()
	hub := pgstore.NewHub(e.pool, pgstore.HubConfig{ReconnectDelay: 100 * time.Millisecond})
	if err := hub.Start(ctx); err != nil {
		e.t.Fatal(err)
	}
	tools, err := demo.Tools()
	if err != nil {
		e.t.Fatal(err)
	}
	ac := agents.Config{Tools: tools, Loop: agentloop.Config{RetryBackoff: time.Millisecond}}
	var approvals *approval.Service
	if e.parking {
		for _, spec := range []registry.ClientSpec{{Name: "pick", TimeoutMs: 600_000}, {Name: "pick_fast", TimeoutMs: 300}} {
			ct, err := registry.ClientTool(spec)
			if err != nil {
				e.t.Fatal(err)
			}
			ac.Tools = append(ac.Tools, ct)
		}
		approvals = approval.New(approval.Config{})
		ac.Approvals = approvals
	}
	ag, err := agents.New(ac)
	if err != nil {
		e.t.Fatal(err)
	}
	wc := worker.Config{Store: e.store, Hub: hub, Presets: e.presets, Agents: ag, Approvals: approvals,
		LeaseTTL: ttl, SweepInterval: 200 * time.Millisecond}
	if tweak != nil {
		tweak(&wc)
	}
	svc, err := worker.New(wc)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = svc.Stop(ctx)
		hub.Stop()
	})
	return &replica{svc: svc, hub: hub, store: e.store}
}

func (e *env) session() uuid.UUID {
	e.t.Helper()
	pid := e.preset.ID
	s, err := e.store.SessionCreate(context.Background(), e.tenant, pgstore.SessionParams{PresetID: &pid, PresetVersion: e.preset.Version})
	if err != nil {
		e.t.Fatal(err)
	}
	return s.ID
}

func (e *env) events(sid uuid.UUID) []eventlog.Event {
	e.t.Helper()
	var out []eventlog.Event
	after := int64(-1)
	for {
		page, err := e.store.EventList(context.Background(), e.tenant, sid, pgstore.ListQuery{After: after, Limit: 1000})
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, page...)
		if len(page) < 1000 {
			return out
		}
		after = page[len(page)-1].Seq
	}
}

func count(evs []eventlog.Event, typ string) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// waitFor waits, on the hub, until the session's log holds an event of type typ.
func (e *env) waitFor(hub *pgstore.Hub, sid uuid.UUID, typ string) {
	e.t.Helper()
	wake, unsub := hub.Subscribe(sid)
	defer unsub()
	deadline := time.After(30 * time.Second)
	for count(e.events(sid), typ) == 0 {
		select {
		case <-wake:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			e.t.Fatalf("session %s: no %s within 30s", sid, typ)
		}
	}
}

// waitTurnEnds waits, on the hub, until the session's log holds n turn/end events.
func (e *env) waitTurnEnds(hub *pgstore.Hub, sid uuid.UUID, n int, within time.Duration) []eventlog.Event {
	e.t.Helper()
	wake, unsub := hub.Subscribe(sid)
	defer unsub()
	deadline := time.After(within)
	for {
		evs := e.events(sid)
		if count(evs, eventlog.TypeTurnEnd) >= n {
			return evs
		}
		select {
		case <-wake:
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			e.t.Fatalf("session %s: %d turn/end events after %v, want %d", sid, count(evs, eventlog.TypeTurnEnd), within, n)
		}
	}
}

func post(t *testing.T, r *replica, tenantID, sid uuid.UUID, text, mode string) {
	t.Helper()
	sess, err := r.store.SessionGet(context.Background(), tenantID, sid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.svc.Post(context.Background(), tenantID, sess.ID, llm.NewUserMessage(uuid.NewString(), text), mode, nil); err != nil {
		t.Fatal(err)
	}
}

func reasons(t *testing.T, evs []eventlog.Event) []string {
	var out []string
	for _, ev := range evs {
		if ev.Type == eventlog.TypeTurnEnd {
			var d struct {
				Reason struct {
					Kind string `json:"kind"`
				} `json:"reason"`
			}
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			out = append(out, d.Reason.Kind)
		}
	}
	return out
}

func TestPostRunsTurnOnWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.replica(10 * time.Second)
	sid := e.session()
	post(t, r, e.tenant, sid, "tools:3", worker.ModeFollowup)
	evs := e.waitTurnEnds(r.hub, sid, 1, 30*time.Second)
	if err := eventlog.CheckInvariants(evs); err != nil {
		t.Fatal(err)
	}
	if got := reasons(t, evs); got[0] != eventlog.EndCompleted || count(evs, eventlog.TypeToolResult) != 3 {
		t.Fatalf("reasons %v, %d results", got, count(evs, eventlog.TypeToolResult))
	}
	// The lease is released once the inbox is empty (just after the last turn/end commits).
	e.waitReleased(sid)
}

// waitReleased waits until no worker holds the session's lease (it is released just after the
// last turn/end commits).
func (e *env) waitReleased(sid uuid.UUID) {
	e.t.Helper()
	eventually(e.t, 10*time.Second, func() bool {
		h, err := e.store.SessionHead(context.Background(), e.tenant, sid)
		return err == nil && h.Lease.Owner == ""
	})
}

// eventually polls cond until it holds or within has passed.
func eventually(t *testing.T, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCancelFromAnotherReplica(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := e.replica(10*time.Second), e.replica(10*time.Second)
	sid := e.session()
	post(t, a, e.tenant, sid, `tool:sleep args:{"ms":60000,"text":"zzz"}`, worker.ModeFollowup)
	// Wait until the sleep body is running: its tool/call is durable before the body starts.
	e.waitFor(a.hub, sid, eventlog.TypeToolCall)
	for _, r := range []*replica{a, b} {
		ok, err := r.svc.Cancel(context.Background(), e.tenant, sid, false)
		if err != nil || !ok {
			t.Fatalf("cancel: %v %v", ok, err)
		}
		break
	}
	evs := e.waitTurnEnds(b.hub, sid, 1, 20*time.Second)
	if got := reasons(t, evs); got[0] != eventlog.EndAborted {
		t.Fatalf("reasons %v", got)
	}
	if err := eventlog.CheckInvariants(evs); err != nil {
		t.Fatal(err)
	}
}

func TestCrashedRunnerIsRepairedAndNextMessageServed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.session()
	ctx := context.Background()
	// A replica that died mid-turn: it holds the lease and left a tool call without result.
	dead := uuid.New()
	if ok, _, err := e.store.LeaseAcquire(ctx, e.tenant, sid, dead, 300*time.Millisecond); err != nil || !ok {
		t.Fatal(ok, err)
	}
	call := llm.ToolCallBlock("c1", "echo", `{"text":"x"}`)
	am := llm.Message{ID: "m1", Role: llm.RoleAssistant, Content: []llm.Block{call},
		Source: llm.Source{Kind: llm.SourceModel, Provider: "scripted", Model: "scripted-1"}}
	_, err := e.store.Journal(nil, e.tenant, sid, dead).Append(ctx, eventlog.Batch(
		eventlog.NewEvent{Type: "turn/start", Data: map[string]int{"turn": 1}},
		eventlog.NewEvent{Type: "step/start", Data: map[string]int{"turn": 1, "step": 1}},
		eventlog.NewEvent{Type: "user/message", Data: llm.NewUserMessage("u0", "tools:1"), SurfaceOp: eventlog.Append},
		eventlog.NewEvent{Type: "assistant/message", Data: map[string]any{"turn": 1, "step": 1, "message": am},
			SurfaceOp: eventlog.Append, SourceEventSeqs: []int64{}},
		eventlog.NewEvent{Type: "tool/call", Data: map[string]any{"turn": 1, "step": 1, "callId": "c1", "name": "echo", "arguments": `{"text":"x"}`}},
	))
	if err != nil {
		t.Fatal(err)
	}
	r := e.replica(time.Second)
	post(t, r, e.tenant, sid, "text", worker.ModeFollowup)
	evs := e.waitTurnEnds(r.hub, sid, 2, 30*time.Second)
	if got := reasons(t, evs); got[0] != eventlog.EndInterrupted || got[1] != eventlog.EndCompleted {
		t.Fatalf("reasons %v", got)
	}
	var codes []string
	for _, ev := range evs {
		if ev.Type == eventlog.TypeToolResult {
			var d struct {
				Error *fault.Info `json:"error"`
			}
			_ = json.Unmarshal(ev.Data, &d)
			codes = append(codes, d.Error.Code)
		}
	}
	if len(codes) != 1 || codes[0] != fault.CodeToolOutcomeUnknown {
		t.Fatalf("repair codes %v", codes)
	}
	if err := eventlog.CheckInvariants(evs); err != nil {
		t.Fatal(err)
	}
}

func TestTwoReplicasServeEveryMessageOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reps := []*replica{e.replica(5 * time.Second), e.replica(5 * time.Second)}
	const sessions, msgs = 12, 3
	var wg sync.WaitGroup
	ids := make([]uuid.UUID, sessions)
	for i := range ids {
		ids[i] = e.session()
	}
	for i, sid := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range msgs {
				r := reps[rand.IntN(len(reps))]
				mode := worker.ModeFollowup
				if m == 1 && i%2 == 0 {
					mode = worker.ModeSteer
				}
				post(t, r, e.tenant, sid, fmt.Sprintf("tools:%d", 1+m), mode)
			}
		}()
	}
	wg.Wait()
	for _, sid := range ids {
		evs := waitServed(e, reps[1].hub, sid, msgs)
		if err := eventlog.CheckInvariants(evs); err != nil {
			t.Fatalf("session %s: %v", sid, err)
		}
	}
}

// waitServed waits until every posted message of the session entered a step exactly once and
// the last turn ended.
func waitServed(e *env, hub *pgstore.Hub, sid uuid.UUID, msgs int) []eventlog.Event {
	e.t.Helper()
	wake, unsub := hub.Subscribe(sid)
	defer unsub()
	deadline := time.After(60 * time.Second)
	for {
		evs := e.events(sid)
		seen := map[string]int{}
		for _, ev := range evs {
			if ev.Type == eventlog.TypeUserMessage {
				var m llm.Message
				_ = json.Unmarshal(ev.Data, &m)
				if m.Source.Kind == llm.SourceUser {
					seen[m.ID]++
				}
			}
		}
		_, open := eventlog.OpenTurn(evs)
		if len(seen) == msgs && !open {
			for id, n := range seen {
				if n != 1 {
					e.t.Fatalf("message %s served %d times", id, n)
				}
			}
			return evs
		}
		select {
		case <-wake:
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			e.t.Fatalf("session %s: %d of %d messages served", sid, len(seen), msgs)
		}
	}
}

// TestLOOP7_KeptInboxWaitsForTheNextWake: after a cancel that keeps the inbox, an injected
// message stays in next-step and the lease is released: no turn starts until a waking message
// (LOOP-1 inject does not wake; LOOP-7 parked input waits for the next wake). The next followup
// serves both.
func TestLOOP7_KeptInboxWaitsForTheNextWake(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.replica(10 * time.Second)
	sid := e.session()
	ctx := context.Background()
	post(t, r, e.tenant, sid, `tool:sleep args:{"ms":60000,"text":"z"}`, worker.ModeFollowup)
	e.waitFor(r.hub, sid, eventlog.TypeToolCall)
	post(t, r, e.tenant, sid, "injected", worker.ModeInject)
	if ok, err := r.svc.Cancel(ctx, e.tenant, sid, true); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	e.waitTurnEnds(r.hub, sid, 1, 20*time.Second)
	e.waitReleased(sid)
	h, err := e.store.SessionHead(ctx, e.tenant, sid)
	if err != nil || h.Inbox.NextStep != 1 || count(e.events(sid), eventlog.TypeTurnStart) != 1 {
		t.Fatalf("after release: head %+v %v, %d turns; want the injected message parked and no new turn",
			h, err, count(e.events(sid), eventlog.TypeTurnStart))
	}
	post(t, r, e.tenant, sid, "text", worker.ModeFollowup)
	evs := e.waitTurnEnds(r.hub, sid, 2, 20*time.Second)
	if got := reasons(t, evs); got[0] != eventlog.EndAborted || got[1] != eventlog.EndCompleted {
		t.Fatalf("reasons %v", got)
	}
	var entered []string
	for _, ev := range evs {
		if ev.Type == eventlog.TypeUserMessage {
			var m llm.Message
			_ = json.Unmarshal(ev.Data, &m)
			entered = append(entered, m.Text())
		}
	}
	if len(entered) != 3 || entered[1] != "injected" || entered[2] != "text" {
		t.Fatalf("entered %q", entered)
	}
}
