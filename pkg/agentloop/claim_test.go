package agentloop

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/llm/scripted"
	"github.com/dshd/dshd/pkg/registry"
)

// Regression tests for defects a review of the durable core found.

// recProvider records the requests it streams.
type recProvider struct {
	p    llm.Provider
	mu   sync.Mutex
	reqs []llm.Request
}

func (p *recProvider) Stream(ctx context.Context, req llm.Request) (llm.Stream, error) {
	p.mu.Lock()
	p.reqs = append(p.reqs, req)
	p.mu.Unlock()
	return p.p.Stream(ctx, req)
}

// ctxJournal behaves like the PostgreSQL journal towards ctx: an append whose ctx is done fails.
// onAppend runs first, where a test can cancel as a watcher would while a statement is in flight.
type ctxJournal struct {
	*eventlog.MemJournal
	onAppend func()
}

func (j *ctxJournal) Append(ctx context.Context, build eventlog.BuildFunc) ([]eventlog.Event, error) {
	if j.onAppend != nil {
		j.onAppend()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return j.MemJournal.Append(ctx, build)
}

func TestLOOP6_ContextsOfAParallelStepEnterTheNextStep(t *testing.T) {
	t.Parallel()
	g, tool := newGate(t)
	close(g.release)
	rp := &recProvider{p: scripted.New(scripted.Config{})}
	h := newHarness(t, rp, tool)
	h.post(eventlog.InboxNextTurn, "tools:1 tool:gate")
	if reasons := h.serve(context.Background()); len(reasons) != 1 {
		t.Fatalf("%d turns, want 1: the context must enter the same turn's next step", len(reasons))
	}
	if len(rp.reqs) != 2 {
		t.Fatalf("%d model requests", len(rp.reqs))
	}
	found := false
	for _, m := range rp.reqs[1].Messages {
		found = found || strings.HasPrefix(m.Text(), "context from")
	}
	if !found {
		t.Fatal("the second model request lacks the context of the first step's tool result")
	}
}

func TestLOOP7_CancelDuringAWriteStillClosesTheTurn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.post(eventlog.InboxNextTurn, "text chunks:20 chunkdelay:5")
	cj := &ctxJournal{MemJournal: h.j}
	h.cfg.ChunkWindow = 10 * time.Millisecond
	r := NewRunner(h.cfg, cj)
	fired := false
	cj.onAppend = func() {
		for _, s := range r.w.pending {
			if !fired && s.typ == eventlog.TypeAssistantChunk {
				fired = true
				r.Interrupt(Cause{Kind: "user"})
			}
		}
	}
	reasons, err := r.Serve(context.Background())
	if _, open := eventlog.OpenTurn(h.j.Events()); err != nil || open || reasons[0].Kind != eventlog.EndAborted {
		t.Fatalf("reasons %+v, err %v, turn left open %v; want aborted{user}", reasons, err, open)
	}
}

// TestLOOP7_CancelRacingTheFirstClaimAbortsTheTurn: a cancel that clears the inbox before the
// turn's claim is written aborts the turn, and what it removed is given to no one (docs/rules.md,
// cancel-exact): no model request, no user/message, the turn ends aborted{user}, nothing waits.
// Finding (issue 18): the claim rode the turn's next batch while the model was already called
// with the message, so a cancel in that window marked the message canceled and the model was
// given it anyway (entered in the history, a model call billed).
func TestLOOP7_CancelRacingTheFirstClaimAbortsTheTurn(t *testing.T) {
	t.Parallel()
	rp := &recProvider{p: scripted.New(scripted.Config{})}
	h := newHarness(t, rp)
	h.post(eventlog.InboxNextTurn, "text")
	cj := &ctxJournal{MemJournal: h.j}
	r := NewRunner(h.cfg, cj)
	h.watch(r)
	fired := false
	cj.onAppend = func() {
		if !fired {
			fired = true
			h.cancel(Cause{Kind: "user"}, false)
		}
	}
	reasons, err := r.Serve(context.Background())
	if err != nil || len(reasons) != 1 || reasons[0].Kind != eventlog.EndAborted || reasons[0].Reason.Kind != "user" {
		t.Fatalf("reasons %+v, err %v, log %v", reasons, err, h.types())
	}
	ends := h.ofType(eventlog.TypeTurnEnd)
	if len(ends) != 1 || decode[eventlog.TurnEnd](t, ends[0].Data).Reason.Kind != eventlog.EndAborted {
		t.Fatalf("turn/end %v", ends)
	}
	if r.Pending() || len(h.ofType(eventlog.TypeUserMessage)) != 0 || len(rp.reqs) != 0 {
		t.Fatalf("inbox %+v, user messages %d, model requests %d: the cancelled message must reach neither the history nor the model, nor wait",
			r.m.inbox, len(h.ofType(eventlog.TypeUserMessage)), len(rp.reqs))
	}
	h.checkInvariants()
}

func TestLOOP2_StepLimitLeavesUnclaimedInputInTheInbox(t *testing.T) {
	t.Parallel()
	g, tool := newGate(t)
	h := newHarness(t, nil, tool)
	h.cfg.MaxSteps = 1
	h.post(eventlog.InboxNextTurn, "tools:1 tool:gate")
	r := NewRunner(h.cfg, h.j)
	done := h.serveAsync(r)
	<-g.started
	steer := h.post(eventlog.InboxNextStep, "please steer")
	close(g.release)
	s := <-done
	if s.err != nil || s.reasons[0].Error == nil || s.reasons[0].Error.Code != CodeMaxSteps {
		t.Fatalf("served %+v %v", s.reasons, s.err)
	}
	// The steer was not claimed by the turn that hit its limit: the next turn enters it.
	entered := false
	for _, ev := range h.ofType(eventlog.TypeUserMessage) {
		entered = entered || decode[llm.Message](t, ev.Data).ID == steer.ID
	}
	if !entered || len(s.reasons) != 2 {
		t.Fatalf("steer entered %v, %d turns: %v", entered, len(s.reasons), h.types())
	}
	h.checkInvariants()
}

func TestLOOP1_DuplicateContextIDsAreReissued(t *testing.T) {
	t.Parallel()
	tool, err := registry.Define(registry.DefineSpec[struct{}, string]{Name: "dupctx", Description: "d", ConcurrencySafe: true},
		func(_ context.Context, exec *registry.Execution, _ struct{}) (string, error) {
			m := llm.NewUserMessage("same-id", "a note")
			m.Source = llm.Source{Kind: llm.SourcePlugin, Plugin: "test"}
			exec.DeferContext(m)
			return "ok", nil
		})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, nil, tool)
	h.post(eventlog.InboxNextTurn, "tools:2 tool:dupctx args:{}")
	h.serve(context.Background())
	// A fresh runner (another replica) loads the committed log.
	if _, err := NewRunner(h.cfg, h.j).Serve(context.Background()); err != nil {
		t.Fatalf("the committed log can no longer be served: %v", err)
	}
	ids := map[string]bool{}
	for _, ev := range h.ofType(eventlog.TypeUserMessage) {
		id := decode[llm.Message](t, ev.Data).ID
		if ids[id] {
			t.Fatalf("message id %s entered twice", id)
		}
		ids[id] = true
	}
	h.checkInvariants()
}

// TestKeepInboxCancelBeforeClaimKeepsTheMessage: review P1-a, a keepInbox cancel committed between
// the runner's view and its claim consumed the message and called the model.
func TestKeepInboxCancelBeforeClaimKeepsTheMessage(t *testing.T) {
	rp := &recProvider{p: scripted.New(scripted.Config{})}
	h := newHarness(t, rp)
	h.post(eventlog.InboxNextTurn, "text")
	cj := &ctxJournal{MemJournal: h.j}
	r := NewRunner(h.cfg, cj)
	h.watch(r)
	fired := false
	cj.onAppend = func() {
		if !fired {
			fired = true
			h.cancel(Cause{Kind: "user"}, true)
		}
	}
	reasons, err := r.Serve(context.Background())
	t.Logf("reasons %+v err %v", reasons, err)
	t.Logf("log %v", h.types())
	t.Logf("pending %v user messages %d model requests %d", r.Pending(), len(h.ofType(eventlog.TypeUserMessage)), len(rp.reqs))
	if !r.Pending() || len(h.ofType(eventlog.TypeUserMessage)) != 0 || len(rp.reqs) != 0 {
		t.Errorf("keepInbox: the message was taken by the cancelled turn instead of kept")
	}
}

// TestInPlaceReplacementBeforeClaimEntersTheNewText: review P1-b, a notice replaced in place (same id)
// between the plan and the claim was entered with its old text.
func TestInPlaceReplacementBeforeClaimEntersTheNewText(t *testing.T) {
	rp := &recProvider{p: scripted.New(scripted.Config{})}
	h := newHarness(t, rp)
	msg := h.post(eventlog.InboxNextTurn, "text")
	cj := &ctxJournal{MemJournal: h.j}
	r := NewRunner(h.cfg, cj)
	fired := false
	cj.onAppend = func() {
		if !fired {
			fired = true
			one := 1
			repl := llm.NewUserMessage(msg.ID, "text REPLACED")
			_, err := h.j.Append(context.Background(), func(hd eventlog.Head) ([]eventlog.NewEvent, error) {
				return []eventlog.NewEvent{{Type: eventlog.TypeInboxSpliced, Data: eventlog.InboxSpliced{Target: eventlog.InboxNextTurn, Start: 0, RemovedCount: &one, Inserted: []llm.Message{repl}}}}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := r.Serve(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, ev := range h.ofType(eventlog.TypeUserMessage) {
		m, _ := eventlog.Decode[eventlog.UserMessage](ev)
		t.Logf("entered %q (inbox had %q at claim time)", m.Text(), "text REPLACED")
		if m.Text() != "text REPLACED" {
			t.Errorf("stale content entered")
		}
	}
}
