package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	et "github.com/dshd/dshd/pkg/eventlog/eventlogtest"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/pgstore"
)

func count(t testing.TB, st *pgstore.Store, tenant, id uuid.UUID) int {
	t.Helper()
	evs, err := st.EventList(context.Background(), tenant, id, pgstore.ListQuery{After: -1, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(evs)
}

func TestScenario36_AppendRejectsBadEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, tenant := newStore(t, pgstore.StoreConfig{})
	sess := newSession(t, st, tenant)
	if _, err := appendEvents(st, ctx, tenant, sess.ID, et.TurnStart(1)); err != nil {
		t.Fatal(err)
	}
	bad := map[string]eventlog.NewEvent{
		"user/message without surfaceOp": {Type: "user/message", Data: et.UserMsg("m", "x")},
		"turn/start with surfaceOp":      {Type: "turn/start", Data: map[string]int{"turn": 2}, SurfaceOp: eventlog.Append},
		"-0":                             et.Raw("todo/write", `{"todos":[],"n":-0}`),
		"-0.0":                           et.Raw("todo/write", `{"todos":[],"n":-0.0}`),
		"-0e0":                           et.Raw("todo/write", `{"todos":[],"n":-0e0}`),
		"invalid JSON":                   et.Raw("todo/write", `{"todos":[`),
		"non-object data":                et.Raw("todo/write", `[]`),
		"duplicate keys":                 et.Raw("todo/write", `{"todos":[],"todos":[]}`),
		"source not earlier":             {Type: "user/message", Data: et.UserMsg("m", "x"), SurfaceOp: eventlog.Append, SourceEventSeqs: []int64{2}},
	}
	for name, ev := range bad {
		// In a batch after a valid event: the whole batch is refused.
		_, err := appendEvents(st, ctx, tenant, sess.ID, et.StepStart(1, 1), ev)
		var ve *eventlog.ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%s: error = %v, want a ValidationError", name, err)
		}
		if n := count(t, st, tenant, sess.ID); n != 1 {
			t.Fatalf("%s: log has %d events, want 1 (unchanged)", name, n)
		}
	}
	got, err := appendEvents(st, ctx, tenant, sess.ID, et.StepStart(1, 1))
	if err != nil || got[0].Seq != 1 {
		t.Fatalf("append after refusals = %v, %v; want seq 1", got, err)
	}
}

func TestScenario37_SurfaceReplace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, tenant := newStore(t, pgstore.StoreConfig{})
	sess := newSession(t, st, tenant)
	_, err := appendEvents(st, ctx, tenant, sess.ID, et.TurnStart(1), et.StepStart(1, 1), et.User("m1", "a"),
		et.Assistant(1, 1, et.AssistantMsg("a1", llm.ToolCallBlock("c1", "echo", "{}"))), et.ToolCall(1, 1, "c1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := appendEvents(st, ctx, tenant, sess.ID, et.ToolResult(1, 1, "r1", "c1", "big", 4), et.User("m2", "b")); err != nil {
		t.Fatal(err)
	}
	// Surface: 2 (m1), 3 (a1), 5 (r1), 6 (m2).
	missing := eventlog.NewEvent{Type: "user/message", Data: et.UserMsg("s", "sum"), SurfaceOp: eventlog.ReplaceOp(2, 5), SourceEventSeqs: []int64{2, 5}}
	_, err = appendEvents(st, ctx, tenant, sess.ID, missing)
	et.WantRule(t, err, "SES-3")
	changed := eventlog.NewEvent{Type: "tool/result", SurfaceOp: eventlog.ReplaceOp(5, 5), SourceEventSeqs: []int64{5},
		Data: map[string]any{"turn": 1, "step": 2, "message": llm.NewToolResultMessage("r1", "c1", []llm.Block{llm.TextBlock("x")}, false)}}
	_, err = appendEvents(st, ctx, tenant, sess.ID, changed)
	et.WantRule(t, err, "SES-4")
	pruned := eventlog.NewEvent{Type: "tool/result", SurfaceOp: eventlog.ReplaceOp(5, 5), SourceEventSeqs: []int64{5},
		Data: map[string]any{"turn": 1, "step": 1, "message": llm.NewToolResultMessage("r1", "c1", []llm.Block{llm.TextBlock("[pruned]")}, false)}}
	summary := eventlog.NewEvent{Type: "user/message", Data: et.UserMsg("s", "sum"), SurfaceOp: eventlog.ReplaceOp(2, 3), SourceEventSeqs: []int64{2, 3}}
	got, err := appendEvents(st, ctx, tenant, sess.ID, pruned, summary)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Seq != 7 || got[1].Seq != 8 {
		t.Fatalf("seqs = %d, %d; want 7, 8", got[0].Seq, got[1].Seq)
	}
	msgs, err := st.DeriveMessages(ctx, tenant, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	if fmt.Sprint(ids) != "[s r1 m2]" || msgs[1].Content[0].Content[0].Text != "[pruned]" {
		t.Fatalf("derived = %v", ids)
	}
	// The same log in memory has replaceGeneration 2 and the same history.
	evs, _ := st.EventList(ctx, tenant, sess.ID, pgstore.ListQuery{After: -1})
	l, err := eventlog.LoadLog(evs)
	if err != nil || l.ReplaceGeneration() != 2 {
		t.Fatalf("replay: %v, generation %d", err, l.ReplaceGeneration())
	}
}

func TestScenario38_CrashRepair(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, tenant := newStore(t, pgstore.StoreConfig{})
	sess := newSession(t, st, tenant)
	calls := et.AssistantMsg("a1", llm.ToolCallBlock("A", "echo", "{}"), llm.ToolCallBlock("B", "echo", "{}"))
	evs, err := appendEvents(st, ctx, tenant, sess.ID, et.TurnStart(1), et.StepStart(1, 1), et.User("m1", "go"), et.Assistant(1, 1, calls), et.ToolCall(1, 1, "A"))
	if err != nil {
		t.Fatal(err)
	}
	closers, err := repair(st, ctx, tenant, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, c := range closers {
		types = append(types, c.Type)
		if c.Time != evs[4].Time {
			t.Errorf("closer time %d, want the last event's %d", c.Time, evs[4].Time)
		}
	}
	if fmt.Sprint(types) != "[tool/result tool/result step/end turn/end]" || closers[0].Seq != 5 {
		t.Fatalf("closers = %v from seq %d", types, closers[0].Seq)
	}
	var a, b struct {
		Message llm.Message       `json:"message"`
		Error   map[string]string `json:"error"`
	}
	_ = json.Unmarshal(closers[0].Data, &a)
	_ = json.Unmarshal(closers[1].Data, &b)
	if a.Error["code"] != "TOOL_OUTCOME_UNKNOWN" || !slices.Equal(closers[0].SourceEventSeqs, []int64{4}) || a.Message.Source.CallID != "A" ||
		a.Message.Content[0].Content[0].Text != eventlog.OutcomeUnknownText || !a.Message.Content[0].IsError {
		t.Fatalf("result A = %s %v", closers[0].Data, closers[0].SourceEventSeqs)
	}
	if b.Error["code"] != "TOOL_NOT_STARTED" || closers[1].SourceEventSeqs != nil || b.Message.Content[0].Content[0].Text != eventlog.NotStartedText {
		t.Fatalf("result B = %s", closers[1].Data)
	}
	if string(closers[3].Data) != `{"turn":1,"reason":{"kind":"interrupted"}}` {
		t.Fatalf("turn/end = %s", closers[3].Data)
	}
	all, _ := st.EventList(ctx, tenant, sess.ID, pgstore.ListQuery{After: -1})
	if len(all) != 9 || eventlog.CheckInvariants(all) != nil {
		t.Fatalf("repaired log: %d events, invariants %v", len(all), eventlog.CheckInvariants(all))
	}
	again, err := repair(st, ctx, tenant, sess.ID)
	if err != nil || again != nil {
		t.Fatalf("repair of a balanced log = %v, %v; want nothing", again, err)
	}
	if _, err := repair(st, ctx, uuid.New(), sess.ID); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("repair by another tenant: %v", err)
	}
}

func TestSES14_ClosersWithoutCallsOrStep(t *testing.T) {
	t.Parallel()
	l := eventlog.NewLog(nil)
	et.MustAppend(t, l, et.TurnStart(1), et.StepStart(1, 1), et.StepEnd(1, 1))
	c := l.Closers()
	if len(c) != 1 || c[0].Type != "turn/end" || c[0].Seq != 3 {
		t.Fatalf("closers = %+v, want only turn/end at seq 3", c)
	}
	if err := l.AppendEvents(c...); err != nil {
		t.Fatal(err)
	}
	if _, open := l.OpenTurn(); open || l.Closers() != nil {
		t.Fatal("turn still open after the closers")
	}
	if eventlog.NewLog(nil).Closers() != nil {
		t.Fatal("an empty log got closers")
	}
}

func TestScenario39_Fork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tenant := newStore(t, pgstore.StoreConfig{})
	src, err := st.SessionCreate(ctx, tenant, pgstore.SessionParams{Cwd: "/work"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = appendEvents(st, ctx, tenant, src.ID, et.TurnStart(1), et.StepStart(1, 1), et.User("m1", "a"), et.StepEnd(1, 1), et.TurnEnd(1),
		et.TurnStart(2), et.StepStart(2, 1))
	if err != nil {
		t.Fatal(err)
	}
	fe := func(err error, code string) {
		t.Helper()
		var f *pgstore.ForkError
		if !errors.As(err, &f) || f.Code != code {
			t.Fatalf("error = %v, want %s", err, code)
		}
	}
	_, err = st.Fork(ctx, tenant, src.ID, nil, nil) // default boundary: last event, inside turn 2
	fe(err, pgstore.ForkOpenTurn)
	b := int64(2)
	_, err = st.Fork(ctx, tenant, src.ID, &b, nil)
	fe(err, pgstore.ForkOpenTurn)
	_, err = st.Fork(ctx, tenant, uuid.New(), nil, nil)
	fe(err, pgstore.ForkSessionNotFound)
	_, err = st.Fork(ctx, newTenant(t, pool), src.ID, nil, nil)
	fe(err, pgstore.ForkSessionNotFound)
	for _, bad := range []int64{-1, 7, 100} {
		_, err = st.Fork(ctx, tenant, src.ID, &bad, nil)
		fe(err, pgstore.ForkInvalidBoundary)
	}
	_, err = st.Fork(ctx, tenant, src.ID, &b, &src.ID)
	fe(err, pgstore.ForkSessionAlreadyExists)

	b = 4
	childID := uuid.New()
	child, err := st.Fork(ctx, tenant, src.ID, &b, &childID)
	if err != nil {
		t.Fatal(err)
	}
	if child.ID != childID || child.Header.ParentSession != src.ID.String() || child.Header.SeedLength == nil ||
		*child.Header.SeedLength != 5 || child.Header.Cwd != "/work" || child.LastSeq != 5 {
		t.Fatalf("child = %+v", child)
	}
	evs, _ := st.EventList(ctx, tenant, child.ID, pgstore.ListQuery{After: -1})
	if len(evs) != 6 || evs[5].Type != "session/end-seed" || evs[5].Seq != 5 {
		t.Fatalf("child log = %+v", evs)
	}
	srcEvs, _ := st.EventList(ctx, tenant, src.ID, pgstore.ListQuery{After: -1, Limit: 5})
	for i := range srcEvs {
		if string(srcEvs[i].Data) != string(evs[i].Data) || srcEvs[i].Time != evs[i].Time {
			t.Fatalf("seq %d differs from the source", i)
		}
	}
	// The child is live: it takes appends after its seed.
	if got, err := appendEvents(st, ctx, tenant, child.ID, et.TurnStart(2)); err != nil || got[0].Seq != 6 {
		t.Fatalf("append to child = %v, %v", got, err)
	}
	// A fork of a prefix that ends with session/end-seed gets no second marker.
	grand, err := st.Fork(ctx, tenant, child.ID, ptr(int64(5)), nil)
	if err != nil || grand.LastSeq != 5 {
		t.Fatalf("grandchild = %+v, %v", grand, err)
	}
	if err := st.SessionDelete(ctx, tenant, src.ID); err != nil {
		t.Fatal(err)
	}
	_, err = st.Fork(ctx, tenant, src.ID, &b, nil)
	fe(err, pgstore.ForkSessionNotLive)
}

func ptr[T any](v T) *T { return &v }

func TestSES12_SessionCreateWithSeed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, tenant := newStore(t, pgstore.StoreConfig{})
	seed := et.ReferenceLogs(t, "../eventlog/testdata")["text.jsonl"]
	sess, err := st.SessionCreate(ctx, tenant, pgstore.SessionParams{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	if *sess.Header.SeedLength != int64(len(seed)) || sess.LastSeq != int64(len(seed)) {
		t.Fatalf("session = %+v", sess)
	}
	evs, _ := st.EventList(ctx, tenant, sess.ID, pgstore.ListQuery{After: -1})
	if evs[len(evs)-1].Type != "session/end-seed" {
		t.Fatal("seed not followed by session/end-seed")
	}
	again, err := st.SessionCreate(ctx, tenant, pgstore.SessionParams{Seed: evs})
	if err != nil || again.LastSeq != int64(len(evs)-1) {
		t.Fatalf("a seed ending with session/end-seed got another: %+v, %v", again, err)
	}
	bad := slices.Clone(seed)
	bad[3].Seq = 9
	if _, err := st.SessionCreate(ctx, tenant, pgstore.SessionParams{Seed: bad}); err == nil {
		t.Fatal("a non-contiguous seed was accepted")
	}
	if _, err := st.SessionCreate(ctx, tenant, pgstore.SessionParams{ID: sess.ID}); !errors.Is(err, eventlog.ErrConflict) {
		t.Fatalf("duplicate id: %v", err)
	}
	if _, err := st.SessionCreate(ctx, uuid.New(), pgstore.SessionParams{}); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("unknown tenant: %v", err)
	}
}

func TestReferenceLogsThroughStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, tenant := newStore(t, pgstore.StoreConfig{CheckInvariants: true})
	for name, evs := range et.ReferenceLogs(t, "../eventlog/testdata") {
		sess := newSession(t, st, tenant)
		for i := 0; i < len(evs); {
			n := min(1+rand.IntN(5), len(evs)-i)
			batch := make([]eventlog.NewEvent, n)
			for j := range batch {
				batch[j] = et.AsNew(evs[i+j])
			}
			if _, err := appendEvents(st, ctx, tenant, sess.ID, batch...); err != nil {
				t.Fatalf("%s at %d: %v", name, i, err)
			}
			i += n
		}
		stored, err := st.EventList(ctx, tenant, sess.ID, pgstore.ListQuery{After: -1, Limit: 1000})
		if err != nil || len(stored) != len(evs) {
			t.Fatalf("%s: %d events, %v", name, len(stored), err)
		}
		for i := range evs {
			if string(stored[i].Data) != string(evs[i].Data) || stored[i].Type != evs[i].Type ||
				fmt.Sprint(stored[i].SourceEventSeqs) != fmt.Sprint(evs[i].SourceEventSeqs) ||
				(stored[i].SourceEventSeqs == nil) != (evs[i].SourceEventSeqs == nil) {
				t.Fatalf("%s seq %d: stored %+v, want %+v", name, i, stored[i], evs[i])
			}
		}
		fromStore, err := st.DeriveMessages(ctx, tenant, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		inMemory, _ := eventlog.DeriveMessages(evs)
		a, _ := json.Marshal(fromStore)
		b, _ := json.Marshal(inMemory)
		if string(a) != string(b) {
			t.Fatalf("%s: DeriveMessages differs:\n%s\n%s", name, a, b)
		}
		page, err := st.EventList(ctx, tenant, sess.ID, pgstore.ListQuery{After: 3, Limit: 2, Types: []string{"user/message", "tool/result"}})
		if err != nil || len(page) == 0 || page[0].Type != "user/message" || page[0].Seq != 4 {
			t.Fatalf("%s: filtered page = %+v, %v", name, page, err)
		}
	}
}

func TestSES10_StoreCheckerRefusesBrokenRelations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, tenant := newStore(t, pgstore.StoreConfig{CheckInvariants: true})
	sess := newSession(t, st, tenant)
	if _, err := appendEvents(st, ctx, tenant, sess.ID, et.TurnStart(1)); err != nil {
		t.Fatal(err)
	}
	_, err := appendEvents(st, ctx, tenant, sess.ID, et.TurnStart(2))
	var ie *eventlog.InvariantError
	if !errors.As(err, &ie) || count(t, st, tenant, sess.ID) != 1 {
		t.Fatalf("nested turn: %v", err)
	}
}

func TestConcurrentWritersGaplessSeq(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, tenant := newStore(t, pgstore.StoreConfig{})
	sess := newSession(t, st, tenant)
	const writers, total = 8, 1000
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			left := total / writers
			for i := 0; left > 0; i++ {
				n := 1
				if i%2 == 1 {
					n = min(1+rand.IntN(10), left)
				}
				batch := make([]eventlog.NewEvent, n)
				for j := range batch {
					batch[j] = et.Raw("todo/write", fmt.Sprintf(`{"todos":[],"writer":%d,"i":%d}`, w, i))
				}
				got, err := appendEvents(st, ctx, tenant, sess.ID, batch...)
				if err != nil {
					errs <- err
					return
				}
				for j := 1; j < len(got); j++ {
					if got[j].Seq != got[j-1].Seq+1 {
						errs <- fmt.Errorf("batch seqs not contiguous: %v", got)
						return
					}
				}
				left -= n
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	evs, err := st.EventList(ctx, tenant, sess.ID, pgstore.ListQuery{After: -1, Limit: 1000})
	if err != nil || len(evs) != total {
		t.Fatalf("%d events, %v", len(evs), err)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
	}
	if s, _ := st.SessionGet(ctx, tenant, sess.ID); s.LastSeq != total-1 {
		t.Fatalf("lastSeq = %d", s.LastSeq)
	}
}

func TestCrossTenantReadsAreNotFound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tenant := newStore(t, pgstore.StoreConfig{})
	other := newTenant(t, pool)
	sess := newSession(t, st, tenant)
	if _, err := appendEvents(st, ctx, tenant, sess.ID, et.TurnStart(1)); err != nil {
		t.Fatal(err)
	}
	checks := map[string]error{}
	_, checks["get"] = st.SessionGet(ctx, other, sess.ID)
	_, checks["list events"] = st.EventList(ctx, other, sess.ID, pgstore.ListQuery{After: -1})
	_, checks["append"] = appendEvents(st, ctx, other, sess.ID, et.TurnEnd(1))
	_, checks["append with replace"] = appendEvents(st, ctx, other, sess.ID, eventlog.NewEvent{Type: "user/message",
		Data: et.UserMsg("x", "y"), SurfaceOp: eventlog.ReplaceOp(0, 0), SourceEventSeqs: []int64{0}})
	_, checks["derive"] = st.DeriveMessages(ctx, other, sess.ID)
	_, checks["repair"] = repair(st, ctx, other, sess.ID)
	checks["delete"] = st.SessionDelete(ctx, other, sess.ID)
	_, checks["unknown session"] = st.EventList(ctx, tenant, uuid.New(), pgstore.ListQuery{After: -1})
	for name, err := range checks {
		if !errors.Is(err, eventlog.ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", name, err)
		}
	}
	if list, _, err := st.SessionList(ctx, other, "", 10); err != nil || len(list) != 0 {
		t.Fatalf("other tenant's list = %v, %v", list, err)
	}
	if count(t, st, tenant, sess.ID) != 1 {
		t.Fatal("another tenant changed the log")
	}
	if err := st.SessionDelete(ctx, tenant, sess.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SessionGet(ctx, tenant, sess.ID); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("deleted session get: %v", err)
	}
	if _, err := appendEvents(st, ctx, tenant, sess.ID, et.TurnEnd(1)); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("append to a deleted session: %v", err)
	}
	if _, err := st.EventList(ctx, tenant, sess.ID, pgstore.ListQuery{After: -1}); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("list of a deleted session: %v", err)
	}
}

func TestSessionListPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, tenant := newStore(t, pgstore.StoreConfig{})
	want := map[uuid.UUID]bool{}
	for range 7 {
		want[newSession(t, st, tenant).ID] = true
	}
	seen := map[uuid.UUID]bool{}
	cursor, pages := "", 0
	for {
		page, next, err := st.SessionList(ctx, tenant, cursor, 3)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, s := range page {
			if seen[s.ID] {
				t.Fatalf("session %s listed twice", s.ID)
			}
			seen[s.ID] = true
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if pages != 3 || len(seen) != 7 {
		t.Fatalf("%d pages, %d sessions", pages, len(seen))
	}
	if _, _, err := st.SessionList(ctx, tenant, "%%%", 3); err == nil {
		t.Fatal("a malformed cursor was accepted")
	}
}

func TestAppendTxIsAllOrNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tenant := newStore(t, pgstore.StoreConfig{})
	sess := newSession(t, st, tenant)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := appendTx(st, ctx, tx, tenant, sess.ID, et.TurnStart(1), et.StepStart(1, 1)); err != nil {
			return err
		}
		// A refused append leaves the transaction usable.
		_, err := appendTx(st, ctx, tx, tenant, sess.ID, et.User("m", "x"), et.Raw("todo/write", `{"x":-0}`))
		et.WantRule(t, err, "SES-1")
		_, err = appendTx(st, ctx, tx, tenant, sess.ID, eventlog.NewEvent{Type: "user/message", Data: et.UserMsg("s", "x"),
			SurfaceOp: eventlog.ReplaceOp(9, 9), SourceEventSeqs: []int64{1}})
		et.WantRule(t, err, "SES-3")
		if n := count(t, st, tenant, sess.ID); n != 0 {
			t.Errorf("uncommitted events visible outside the transaction: %d", n)
		}
		got, err := appendTx(st, ctx, tx, tenant, sess.ID, et.User("m", "x"))
		if err == nil && got[0].Seq != 2 {
			err = fmt.Errorf("seq %d, want 2", got[0].Seq)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := count(t, st, tenant, sess.ID); n != 3 {
		t.Fatalf("%d events after commit, want 3", n)
	}
}
