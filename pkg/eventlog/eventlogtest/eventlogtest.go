// Package eventlogtest is the conformance suite of eventlog.Journal. Every implementation (the
// in-memory eventlog.MemJournal, the PostgreSQL adapter) runs Run over a Harness and must pass
// every check: the guarantees the agent loop, the HTTP handlers and the followers rely on,
// whatever journal they are given.
package eventlogtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

// Harness gives the suite fresh sessions of the implementation under test. NewSession is called
// from parallel subtests.
type Harness interface {
	// NewSession returns a new, empty session whose resources are released when t ends.
	NewSession(t *testing.T) Session
}

// Session is one session of the implementation under test. The suite uses a journal's Append
// and Since from one goroutine at a time, and its Wait and Latest from any.
type Session interface {
	// Journal returns a new journal of the session whose appends are fenced by owner's run
	// lease; owner "" is an unfenced writer. Owners are names the harness maps to its own ids.
	Journal(owner string) eventlog.Journal
	// Acquire gives owner the run lease for ttl if it is free, expired or already owner's (then
	// it runs ttl from now), and reports whether owner holds it.
	Acquire(owner string, ttl time.Duration) bool
	// Release frees owner's lease.
	Release(owner string)
}

// Deleter is implemented by sessions that can be deleted; Run then checks a deleted session's
// journals.
type Deleter interface {
	Delete()
}

// Run runs the conformance suite against h, one parallel subtest per guarantee.
func Run(t *testing.T, h Harness) {
	checks := []struct {
		name string
		fn   func(*testing.T, Session)
	}{
		{"LOOP1_InboxFit", func(t *testing.T, s Session) { inboxFit(t, s, "") }},
		{"LOOP1_InboxFitFenced", func(t *testing.T, s Session) { inboxFit(t, s, "runner") }},
		{"StaleHead_BuildErrStaleAppendsNothing", staleBuild},
		{"StaleHead_TwoWriters", staleTwoWriters},
		{"BuildError_ReturnedAsIs", buildErrorAsIs},
		{"LeaseFence_ReleasedThenTaken", func(t *testing.T, s Session) { leaseFence(t, s, false) }},
		{"LeaseFence_ExpiredThenTaken", func(t *testing.T, s Session) { leaseFence(t, s, true) }},
		{"SES9_IgnorableTypes", ignorableTypes},
		{"SES1_ValidationAllOrNothing", validationAllOrNothing},
		{"Append_CancelledContextAppendsNothing", cancelledAppend},
		{"Publish_WaitThenSinceSeesTheBatch", waitThenSince},
		{"Publish_WaitHonoursContext", waitContext},
		{"Publish_LatestNeverAheadOfSince", latestNeverAhead},
		{"Publish_LatestCoversOwnAppendsAndReads", latestOwn},
		{"ContiguousSeqsUnderConcurrency", concurrentAppends},
		{"Since_OrderAndBytes", sinceOrderAndBytes},
		{"DeletedSession_NotFound", deletedSession},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, h.NewSession(t))
		})
	}
}

// Events.

const markType = "eventlogtest/mark" // an unknown, ignorable type with free data

func typed(typ string, data any) eventlog.NewEvent { return eventlog.NewEvent{Type: typ, Data: data} }

func raw(typ, data string) eventlog.NewEvent {
	return eventlog.NewEvent{Type: typ, Data: json.RawMessage(data)}
}

func turnStart(n int) eventlog.NewEvent {
	return typed(eventlog.TypeTurnStart, map[string]int{"turn": n})
}

func turnEnd(n int) eventlog.NewEvent {
	return typed(eventlog.TypeTurnEnd, map[string]any{"turn": n, "reason": map[string]string{"kind": "completed"}})
}

func stepStart(turn, step int) eventlog.NewEvent {
	return typed(eventlog.TypeStepStart, map[string]int{"turn": turn, "step": step})
}

func stepEnd(turn, step int) eventlog.NewEvent {
	return typed(eventlog.TypeStepEnd, map[string]int{"turn": turn, "step": step})
}

func user(id, text string) eventlog.NewEvent {
	return eventlog.NewEvent{Type: eventlog.TypeUserMessage, Data: llm.NewUserMessage(id, text), SurfaceOp: eventlog.Append}
}

func mark(g, k, p int) eventlog.NewEvent {
	return eventlog.NewEvent{Type: markType, Data: map[string]int{"g": g, "k": k, "p": p}, Ignorable: true}
}

func splice(s eventlog.InboxSpliced) eventlog.NewEvent { return eventlog.Of(s) }

func msg(id string) llm.Message { return llm.NewUserMessage(id, "hello "+id) }

// Helpers.

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustAppend(t *testing.T, j eventlog.Journal, build eventlog.BuildFunc) []eventlog.Event {
	t.Helper()
	out, err := j.Append(testCtx(t), build)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	if len(out) == 0 {
		t.Fatal("append committed nothing")
	}
	return out
}

// peek returns the head a build of j is given, appending nothing.
func peek(t *testing.T, j eventlog.Journal) eventlog.Head {
	t.Helper()
	var got eventlog.Head
	out, err := j.Append(testCtx(t), func(h eventlog.Head) ([]eventlog.NewEvent, error) {
		got = h
		return nil, nil
	})
	if err != nil || len(out) != 0 {
		t.Fatalf("an append of nothing returned %v, %v", out, err)
	}
	return got
}

// all returns the whole log read through j, checking that seqs are contiguous from 0.
func all(t *testing.T, j eventlog.Journal) []eventlog.Event {
	t.Helper()
	evs, err := j.Since(testCtx(t), -1)
	if err != nil {
		t.Fatalf("since -1: %v", err)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i) {
			t.Fatalf("event %d of the log has seq %d (seqs: %v)", i, ev.Seq, seqs(evs))
		}
	}
	return evs
}

func seqs(evs []eventlog.Event) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.Seq
	}
	return out
}

func last(evs []eventlog.Event) int64 { return evs[len(evs)-1].Seq }

// wantLen fails unless the log holds n events.
func wantLen(t *testing.T, j eventlog.Journal, n int, after string) {
	t.Helper()
	if got := all(t, j); len(got) != n {
		t.Fatalf("after %s the log has %d events, want %d (nothing appended)", after, len(got), n)
	}
}

func wantValidation(t *testing.T, err error, rule string) *eventlog.ValidationError {
	t.Helper()
	var ve *eventlog.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error = %v, want a *eventlog.ValidationError (%s)", err, rule)
	}
	if rule != "" && ve.Rule != rule {
		t.Fatalf("rule = %s (%v), want %s", ve.Rule, ve, rule)
	}
	return ve
}

// catchUp appends the batch of build through j the way a writer that follows the log does: when
// the journal reports ErrStale it reads what it missed after *cursor (the last seq it knows) and
// tries again. It checks that the successful attempt committed at the head its build was given,
// advances *cursor, and returns the committed events and that head.
func catchUp(ctx context.Context, j eventlog.Journal, cursor *int64, build eventlog.BuildFunc) ([]eventlog.Event, eventlog.Head, error) {
	for range 50 {
		var seen eventlog.Head
		out, err := j.Append(ctx, func(h eventlog.Head) ([]eventlog.NewEvent, error) {
			seen = h
			return build(h)
		})
		if err == nil {
			if len(out) == 0 {
				return nil, seen, errors.New("append committed nothing")
			}
			if out[0].Seq != seen.Next {
				return nil, seen, fmt.Errorf("the batch built for head %d was committed at seq %d", seen.Next, out[0].Seq)
			}
			*cursor = last(out)
			return out, seen, nil
		}
		if !errors.Is(err, eventlog.ErrStale) {
			return nil, seen, fmt.Errorf("append: %w", err)
		}
		missed, err := j.Since(ctx, *cursor)
		if err != nil {
			return nil, seen, fmt.Errorf("since %d: %w", *cursor, err)
		}
		if len(missed) == 0 {
			return nil, seen, fmt.Errorf("append said ErrStale, but Since(%d) has nothing new", *cursor)
		}
		*cursor = last(missed)
	}
	return nil, eventlog.Head{}, errors.New("still stale after 50 attempts")
}

func acquire(t *testing.T, s Session, owner string, ttl time.Duration) {
	t.Helper()
	if !s.Acquire(owner, ttl) {
		t.Fatalf("%s could not acquire a free lease", owner)
	}
}

// Checks.

// inboxFit (LOOP-1): a splice that does not fit the inbox lengths is refused and nothing is
// appended; a fitting insertion moves Head.Inbox; a deletion claims; the head a later build sees
// reflects it, also after other writers' splices. owner "" appends unfenced, else as a runner.
func inboxFit(t *testing.T, s Session, owner string) {
	ctx := testCtx(t)
	w := s.Journal("")
	j := w
	if owner != "" {
		acquire(t, s, owner, time.Minute)
		j = s.Journal(owner)
	}
	cursor := last(mustAppend(t, j, eventlog.Batch(turnStart(1))))
	if h := peek(t, j); h.Next != 1 || h.Inbox != (eventlog.InboxLens{}) {
		t.Fatalf("head after one event = %+v, want next 1 and an empty inbox", h)
	}

	// Another writer's insertion: j's next build sees it once j has read it.
	ins := mustAppend(t, w, func(h eventlog.Head) ([]eventlog.NewEvent, error) {
		return []eventlog.NewEvent{splice(eventlog.Insertion(eventlog.InboxNextTurn, h.Inbox.NextTurn, msg("m1"), msg("m2")))}, nil
	})
	// (A build may be given a stale head: the append then fails with ErrStale.)
	_, seen, err := catchUp(ctx, j, &cursor, eventlog.Batch(stepStart(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if seen.Inbox != (eventlog.InboxLens{NextTurn: 2}) {
		t.Fatalf("head inbox %+v after an insertion of 2, want next-turn 2", seen.Inbox)
	}
	if cursor != last(ins)+1 {
		t.Fatalf("cursor %d, want %d", cursor, last(ins)+1)
	}
	n := len(all(t, w))

	refused := map[string][]eventlog.NewEvent{
		"deletion of more than the list holds": {splice(eventlog.Deletion(eventlog.InboxNextTurn, 3, ""))},
		"insertion past the end":               {splice(eventlog.Insertion(eventlog.InboxNextTurn, 3, msg("x1")))},
		"deletion from an empty list":          {splice(eventlog.Deletion(eventlog.InboxNextStep, 1, eventlog.OutcomeCanceled))},
		"second splice of the batch does not fit": {
			splice(eventlog.Insertion(eventlog.InboxNextStep, 0, msg("x2"))),
			splice(eventlog.Deletion(eventlog.InboxNextStep, 2, "")),
		},
		"valid events before a misfit": {
			typed(eventlog.TypeTodoWrite, map[string]any{"todos": []any{}}),
			splice(eventlog.Insertion(eventlog.InboxNextTurn, 2, msg("x3"))),
			splice(eventlog.Deletion(eventlog.InboxNextTurn, 4, "")),
		},
	}
	for name, batch := range refused {
		_, err := j.Append(ctx, eventlog.Batch(batch...))
		wantValidation(t, err, "LOOP-1")
		wantLen(t, w, n, "a refused splice ("+name+")")
		if h := peek(t, j); h.Next != int64(n) || h.Inbox != (eventlog.InboxLens{NextTurn: 2}) {
			t.Fatalf("head after a refused splice (%s) = %+v, want next %d and next-turn 2", name, h, n)
		}
	}

	// Splices fold in order within a batch.
	mustAppend(t, j, eventlog.Batch(
		splice(eventlog.Insertion(eventlog.InboxNextStep, 0, msg("m3"))),
		splice(eventlog.Deletion(eventlog.InboxNextStep, 1, ""))))
	// A claim at the step boundary.
	claim := mustAppend(t, j, func(h eventlog.Head) ([]eventlog.NewEvent, error) {
		if h.Inbox != (eventlog.InboxLens{NextTurn: 2}) {
			return nil, fmt.Errorf("head inbox %+v, want next-turn 2", h.Inbox)
		}
		return []eventlog.NewEvent{splice(eventlog.Deletion(eventlog.InboxNextTurn, 1, ""))}, nil
	})
	cursor = last(claim)
	for _, jj := range []eventlog.Journal{j, w} {
		if h := peek(t, jj); h.Inbox != (eventlog.InboxLens{NextTurn: 1}) {
			t.Fatalf("head inbox after a claim = %+v, want next-turn 1", h.Inbox)
		}
	}
	// Another writer's cancel clears the list; j's next build sees it.
	mustAppend(t, w, func(h eventlog.Head) ([]eventlog.NewEvent, error) {
		return []eventlog.NewEvent{splice(eventlog.Deletion(eventlog.InboxNextTurn, h.Inbox.NextTurn, eventlog.OutcomeCanceled))}, nil
	})
	if _, seen, err = catchUp(ctx, j, &cursor, eventlog.Batch(stepEnd(1, 1), turnEnd(1))); err != nil {
		t.Fatal(err)
	}
	if seen.Inbox != (eventlog.InboxLens{}) {
		t.Fatalf("head inbox %+v after a cancel, want empty", seen.Inbox)
	}

	// The journal's lengths are the fold of the logged splices.
	evs := all(t, w)
	var ib eventlog.Inbox
	for _, ev := range evs {
		if ev.Type == eventlog.TypeInboxSpliced {
			if err := ib.ApplyEvent(ev); err != nil {
				t.Fatalf("replaying seq %d: %v", ev.Seq, err)
			}
		}
	}
	if h := peek(t, w); h.Inbox != ib.Lens() || h.Next != int64(len(evs)) {
		t.Fatalf("head %+v, the log folds to %+v with %d events", h, ib.Lens(), len(evs))
	}
	if err := eventlog.CheckInvariants(evs); err != nil {
		t.Fatal(err)
	}
}

// staleBuild: a build that returns ErrStale (as is or wrapped) appends nothing, and Append's
// error is ErrStale for errors.Is.
func staleBuild(t *testing.T, s Session) {
	ctx := testCtx(t)
	acquire(t, s, "runner", time.Minute)
	for _, j := range []eventlog.Journal{s.Journal(""), s.Journal("runner")} {
		before := len(all(t, j))
		mustAppend(t, j, eventlog.Batch(mark(0, before, 0)))
		for _, stale := range []error{eventlog.ErrStale, fmt.Errorf("eventlogtest: head moved: %w", eventlog.ErrStale)} {
			calls := 0
			_, err := j.Append(ctx, func(eventlog.Head) ([]eventlog.NewEvent, error) {
				calls++
				return []eventlog.NewEvent{mark(1, calls, 0)}, stale
			})
			if !errors.Is(err, eventlog.ErrStale) {
				t.Fatalf("append error = %v, want ErrStale", err)
			}
			if calls == 0 {
				t.Fatal("the build was not called")
			}
			wantLen(t, j, before+1, "a build returned ErrStale")
		}
	}
}

// staleTwoWriters: an unfenced writer and a runner (fenced) take turns. After the other one
// appends, a journal's next append either sees the new head in build or fails with ErrStale and,
// after Since, succeeds; seqs stay contiguous and nothing is lost or duplicated.
func staleTwoWriters(t *testing.T, s Session) {
	ctx := testCtx(t)
	acquire(t, s, "runner", time.Minute)
	w, r := s.Journal(""), s.Journal("runner")
	var wCursor, rCursor int64 = -1, -1
	out, _, err := catchUp(ctx, r, &rCursor, eventlog.Batch(turnStart(1)))
	if err != nil {
		t.Fatal(err)
	}
	committed := out
	const rounds = 4
	for round := 1; round <= rounds; round++ {
		// The writer inserts a followup after the runner's events.
		out, seen, err := catchUp(ctx, w, &wCursor, func(h eventlog.Head) ([]eventlog.NewEvent, error) {
			return []eventlog.NewEvent{splice(eventlog.Insertion(eventlog.InboxNextTurn, h.Inbox.NextTurn, msg(fmt.Sprintf("m%d", round))))}, nil
		})
		if err != nil {
			t.Fatalf("round %d, writer: %v", round, err)
		}
		if seen.Next != last(committed)+1 || seen.Inbox.NextTurn != round-1 {
			t.Fatalf("round %d: the writer's batch was built for %+v, want next %d and next-turn %d", round, seen, last(committed)+1, round-1)
		}
		committed = append(committed, out...)
		// The runner appends a step after the writer's splice.
		out, seen, err = catchUp(ctx, r, &rCursor, eventlog.Batch(stepStart(1, round), stepEnd(1, round)))
		if err != nil {
			t.Fatalf("round %d, runner: %v", round, err)
		}
		if seen.Next != last(committed)+1 || seen.Inbox.NextTurn != round {
			t.Fatalf("round %d: the runner's batch was built for %+v, want next %d and next-turn %d (the writer's splice)", round, seen, last(committed)+1, round)
		}
		committed = append(committed, out...)
	}
	if _, _, err := catchUp(ctx, r, &rCursor, eventlog.Batch(turnEnd(1))); err != nil {
		t.Fatal(err)
	}
	evs := all(t, w)
	if len(evs) != len(committed)+1 {
		t.Fatalf("the log has %d events, %d were committed", len(evs), len(committed)+1)
	}
	for i, ev := range committed {
		if !sameEvent(evs[i], ev) {
			t.Fatalf("seq %d: log has %s, append returned %s", i, show(evs[i]), show(ev))
		}
	}
	if err := eventlog.CheckInvariants(evs); err != nil {
		t.Fatal(err)
	}
}

// buildErrorAsIs: a build's error is returned as is and appends nothing; a build of no events
// appends nothing and returns no error.
func buildErrorAsIs(t *testing.T, s Session) {
	ctx := testCtx(t)
	acquire(t, s, "runner", time.Minute)
	errBoom := errors.New("eventlogtest: the build failed")
	known := s.Journal("runner")
	mustAppend(t, known, eventlog.Batch(mark(0, 0, 0))) // a journal that knows the head
	reader := s.Journal("")
	// The new journals have neither appended nor read: a store may still have to learn the head.
	for i, j := range []eventlog.Journal{s.Journal(""), s.Journal("runner"), known} {
		n := len(all(t, reader))
		_, err := j.Append(ctx, func(eventlog.Head) ([]eventlog.NewEvent, error) {
			return []eventlog.NewEvent{mark(1, i, 0)}, errBoom
		})
		if err != errBoom {
			t.Fatalf("journal %d: append error = %v (%T), want the build's error as is", i, err, err)
		}
		out, err := j.Append(ctx, func(eventlog.Head) ([]eventlog.NewEvent, error) { return nil, nil })
		if err != nil || len(out) != 0 {
			t.Fatalf("journal %d: an empty batch returned %v, %v", i, out, err)
		}
		wantLen(t, reader, n, "a failed and an empty build")
	}
}

// leaseFence: a runner's journal appends while its owner holds the lease; once the lease is
// another's (released, or expired, and taken), the old owner's appends fail with ErrLeaseLost
// and append nothing, also after it caught up; the new owner and an unfenced writer append.
func leaseFence(t *testing.T, s Session, expire bool) {
	ctx := testCtx(t)
	w := s.Journal("")
	acquire(t, s, "A", time.Minute)
	a := s.Journal("A")
	mustAppend(t, a, eventlog.Batch(turnStart(1)))
	mustAppend(t, a, eventlog.Batch(stepStart(1, 1))) // a knows the head
	if s.Acquire("B", time.Minute) {
		t.Fatal("B acquired the lease A holds")
	}
	wantLost := func(j eventlog.Journal, who string) {
		t.Helper()
		n := len(all(t, w))
		_, err := j.Append(ctx, eventlog.Batch(mark(9, n, 0)))
		if !errors.Is(err, eventlog.ErrLeaseLost) {
			t.Fatalf("%s: append error = %v, want ErrLeaseLost", who, err)
		}
		wantLen(t, w, n, who+"'s fenced append")
	}
	wantLost(s.Journal("B"), "B, without the lease")
	if expire {
		acquire(t, s, "A", time.Millisecond) // A renews for 1ms
		time.Sleep(30 * time.Millisecond)
	} else {
		s.Release("A")
	}
	acquire(t, s, "B", time.Minute)
	wantLost(a, "A's journal")
	wantLost(s.Journal("A"), "a new journal of A")
	if _, err := a.Since(ctx, -1); err != nil {
		t.Fatal(err)
	}
	wantLost(a, "A's journal, caught up")
	mustAppend(t, s.Journal("B"), eventlog.Batch(stepEnd(1, 1)))
	mustAppend(t, w, eventlog.Batch(splice(eventlog.Insertion(eventlog.InboxNextTurn, 0, msg("m1")))))
	mustAppend(t, s.Journal("B"), eventlog.Batch(turnEnd(1)))
	if s.Acquire("A", time.Minute) {
		t.Fatal("A took back the lease B holds")
	}
	wantLost(a, "A's journal, after B appended")
	if err := eventlog.CheckInvariants(all(t, w)); err != nil {
		t.Fatal(err)
	}
}

// ignorableTypes (SES-9): an unknown type is accepted with ignorable and read back with it;
// without, the append is refused with a *ValidationError and the log is unchanged.
func ignorableTypes(t *testing.T, s Session) {
	ctx := testCtx(t)
	j := s.Journal("")
	ign := eventlog.NewEvent{Type: "vendor-x/annotation", Data: json.RawMessage(`{"any":["shape",1,{"n":null}]}`), Ignorable: true}
	out := mustAppend(t, j, eventlog.Batch(turnStart(1), ign))
	if !out[1].Ignorable || out[1].Type != ign.Type {
		t.Fatalf("committed %s, want the ignorable event", show(out[1]))
	}
	evs := all(t, j)
	if len(evs) != 2 || !sameEvent(evs[1], out[1]) {
		t.Fatalf("read back %v, want %s", evs, show(out[1]))
	}
	bad := ign
	bad.Ignorable = false
	for _, batch := range [][]eventlog.NewEvent{{bad}, {stepStart(1, 1), bad}} {
		_, err := j.Append(ctx, eventlog.Batch(batch...))
		if ve := wantValidation(t, err, "SES-9"); ve.Index != len(batch)-1 {
			t.Fatalf("validation error names event %d, want %d", ve.Index, len(batch)-1)
		}
		wantLen(t, j, 2, "an unknown type without ignorable")
	}
}

// validationAllOrNothing (SES-1): a batch with one invalid event appends nothing, through an
// unfenced writer and through a runner that knows the head; the head does not move.
func validationAllOrNothing(t *testing.T, s Session) {
	ctx := testCtx(t)
	acquire(t, s, "runner", time.Minute)
	w, r := s.Journal(""), s.Journal("runner")
	mustAppend(t, r, eventlog.Batch(turnStart(1)))
	cases := []struct {
		name, rule string
		bad        eventlog.NewEvent
	}{
		{"lossy JSON (negative zero)", "SES-1", raw(eventlog.TypeStepEnd, `{"turn":1,"step":1,"x":-0}`)},
		{"lossy JSON (duplicate keys)", "SES-1", raw(eventlog.TypeStepEnd, `{"turn":1,"step":1,"step":2}`)},
		{"invalid JSON", "SES-1", raw(eventlog.TypeStepEnd, `{"turn":1,`)},
		{"no data", "SES-1", eventlog.NewEvent{Type: eventlog.TypeStepEnd}},
		{"surfaceOp on a non-surface event", "SES-2", eventlog.NewEvent{Type: eventlog.TypeStepEnd,
			Data: map[string]int{"turn": 1, "step": 1}, SurfaceOp: eventlog.Append}},
		{"surface event without surfaceOp", "SES-2", typed(eventlog.TypeUserMessage, llm.NewUserMessage("u2", "hi"))},
		{"source not earlier than the event", "SES-3", eventlog.NewEvent{Type: eventlog.TypeUserMessage,
			Data: llm.NewUserMessage("u3", "hi"), SurfaceOp: eventlog.Append, SourceEventSeqs: []int64{3}}},
		{"bad message shape", "SES-6", eventlog.NewEvent{Type: eventlog.TypeUserMessage,
			Data: llm.NewUserMessage("", "hi"), SurfaceOp: eventlog.Append}},
		{"unknown type", "SES-9", raw("vendor-x/unknown", `{}`)},
	}
	for _, j := range []eventlog.Journal{w, r} {
		for _, c := range cases {
			batch := []eventlog.NewEvent{stepStart(1, 1), user("u1", "hi"), c.bad}
			_, err := j.Append(ctx, eventlog.Batch(batch...))
			if ve := wantValidation(t, err, c.rule); ve.Index != 2 {
				t.Fatalf("%s: the error names event %d of the batch, want 2", c.name, ve.Index)
			}
			wantLen(t, w, 1, c.name)
		}
	}
	out := mustAppend(t, r, eventlog.Batch(stepStart(1, 1), stepEnd(1, 1)))
	if out[0].Seq != 1 {
		t.Fatalf("the next valid batch starts at seq %d, want 1", out[0].Seq)
	}
	out = mustAppend(t, w, eventlog.Batch(turnEnd(1)))
	if out[0].Seq != 3 {
		t.Fatalf("the writer's batch starts at seq %d, want 3", out[0].Seq)
	}
}

// cancelledAppend: an append whose context is done fails with the context's error and appends
// nothing.
func cancelledAppend(t *testing.T, s Session) {
	acquire(t, s, "runner", time.Minute)
	r := s.Journal("runner")
	mustAppend(t, r, eventlog.Batch(mark(0, 0, 0)))
	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	for i, j := range []eventlog.Journal{s.Journal(""), r} {
		out, err := j.Append(ctx, eventlog.Batch(mark(1, i, 0)))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("journal %d: an append with a cancelled context returned %v, %v; want context.Canceled", i, seqs(out), err)
		}
		wantLen(t, j, 1, "an append with a cancelled context")
	}
}

// waitThenSince: Wait returns only once Since returns what was committed: a follower woken by
// Wait reads the whole batch, whichever writer (unfenced or runner) committed it.
func waitThenSince(t *testing.T, s Session) {
	ctx := testCtx(t)
	acquire(t, s, "runner", time.Minute)
	w, r, f := s.Journal(""), s.Journal("runner"), s.Journal("")
	var rCursor, wCursor int64 = -1, -1
	if _, _, err := catchUp(ctx, r, &rCursor, eventlog.Batch(turnStart(1))); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := f.Wait(short, -1); err != nil {
		t.Fatalf("Wait for what is committed already: %v", err)
	}
	cursor := int64(0)
	type result struct {
		evs []eventlog.Event
		err error
	}
	for round := range 6 {
		res := make(chan result, 1)
		go func() {
			if err := f.Wait(ctx, cursor); err != nil {
				res <- result{err: fmt.Errorf("wait: %w", err)}
				return
			}
			evs, err := f.Since(ctx, cursor)
			res <- result{evs, err}
		}()
		time.Sleep(time.Duration(round%3) * 5 * time.Millisecond)
		j, c := w, &wCursor
		if round%2 == 1 {
			j, c = r, &rCursor
		}
		out, _, err := catchUp(ctx, j, c, eventlog.Batch(mark(round, 0, 0), mark(round, 0, 1), mark(round, 0, 2)))
		if err != nil {
			t.Fatal(err)
		}
		var got result
		select {
		case got = <-res:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: Wait(%d) did not return after seqs %v were committed", round, cursor, seqs(out))
		}
		if got.err != nil {
			t.Fatalf("round %d: %v", round, got.err)
		}
		if len(got.evs) != len(out) || !sameEvents(got.evs, out) {
			t.Fatalf("round %d: after Wait(%d), Since returned seqs %v, want the committed batch %v", round, cursor, seqs(got.evs), seqs(out))
		}
		cursor = last(out)
	}
}

// waitContext: Wait blocks while nothing new is committed and returns the context's error once
// it is cancelled or its deadline passes.
func waitContext(t *testing.T, s Session) {
	base := testCtx(t)
	j := s.Journal("")
	mustAppend(t, j, eventlog.Batch(mark(0, 0, 0)))
	ctx, cancel := context.WithCancel(base)
	errc := make(chan error, 1)
	go func() { errc <- j.Wait(ctx, 0) }()
	select {
	case err := <-errc:
		t.Fatalf("Wait(0) on a log ending at 0 returned %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait after cancel returned %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after its context was cancelled")
	}
	dctx, dcancel := context.WithTimeout(base, 50*time.Millisecond)
	defer dcancel()
	start := time.Now()
	if err := s.Journal("").Wait(dctx, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its deadline returned %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Wait returned %v after its deadline", d)
	}
}

// latestNeverAhead: while a runner and a writer append, Latest of every journal (theirs and a
// reader's) never reports a seq that Since cannot return. Latest may lag.
func latestNeverAhead(t *testing.T, s Session) {
	ctx := testCtx(t)
	acquire(t, s, "runner", time.Minute)
	w, r, reader := s.Journal(""), s.Journal("runner"), s.Journal("")
	mustAppend(t, r, eventlog.Batch(mark(0, 0, 0)))
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	const n = 25
	for g, j := range []eventlog.Journal{r, w} {
		wg.Go(func() {
			cursor := int64(-1)
			for k := range n {
				if _, _, err := catchUp(ctx, j, &cursor, eventlog.Batch(mark(g+1, k, 0), mark(g+1, k, 1))); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	checks := 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		for i, j := range []eventlog.Journal{r, w, reader} {
			l := j.Latest()
			if l < -1 {
				t.Fatalf("journal %d: Latest() = %d", i, l)
			}
			if l < 0 {
				continue
			}
			evs, err := reader.Since(ctx, l-1)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) == 0 || evs[0].Seq != l {
				t.Fatalf("journal %d: Latest() = %d, but Since(%d) returns seqs %v", i, l, l-1, seqs(evs))
			}
			checks++
		}
	}
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	final := last(all(t, reader))
	for i, j := range []eventlog.Journal{r, w, reader} {
		if l := j.Latest(); l > final {
			t.Fatalf("journal %d: Latest() = %d, the log ends at %d", i, l, final)
		}
	}
	if checks == 0 {
		t.Fatal("no check ran")
	}
}

// latestOwn: a journal knows what it committed and what it read: its Latest is at least the last
// seq it appended or read (and never past the log).
func latestOwn(t *testing.T, s Session) {
	ctx := testCtx(t)
	acquire(t, s, "runner", time.Minute)
	w, r := s.Journal(""), s.Journal("runner")
	var rCursor int64 = -1
	for k := range 3 {
		out := mustAppend(t, w, eventlog.Batch(mark(0, k, 0), mark(0, k, 1)))
		if l := w.Latest(); l < last(out) {
			t.Fatalf("the writer's Latest() = %d after it committed seq %d", l, last(out))
		}
		out, _, err := catchUp(ctx, r, &rCursor, eventlog.Batch(mark(1, k, 0)))
		if err != nil {
			t.Fatal(err)
		}
		if l := r.Latest(); l < last(out) {
			t.Fatalf("the runner's Latest() = %d after it committed seq %d", l, last(out))
		}
	}
	reader := s.Journal("")
	evs := all(t, reader)
	if l := reader.Latest(); l < last(evs) || l > last(evs) {
		t.Fatalf("a reader's Latest() = %d after it read the log up to %d", l, last(evs))
	}
}

// concurrentAppends: several goroutines append batches through their own unfenced journals of
// one session, and a runner through its fenced one (catching up when stale): seqs are contiguous
// from 0, every batch is committed once and in one piece, and the log holds what each append
// returned.
func concurrentAppends(t *testing.T, s Session) {
	ctx := testCtx(t)
	acquire(t, s, "runner", time.Minute)
	const writers, batches = 4, 8
	var (
		mu        sync.Mutex
		committed = map[int64]eventlog.Event{}
		wg        sync.WaitGroup
	)
	errc := make(chan error, writers+1)
	record := func(out []eventlog.Event) error {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range out {
			if prev, dup := committed[ev.Seq]; dup {
				return fmt.Errorf("seq %d returned twice: %s and %s", ev.Seq, show(prev), show(ev))
			}
			committed[ev.Seq] = ev
		}
		return nil
	}
	for g := range writers {
		wg.Go(func() {
			j := s.Journal("")
			for k := range batches {
				out, err := j.Append(ctx, eventlog.Batch(mark(g, k, 0), mark(g, k, 1)))
				if err == nil {
					err = record(out)
				}
				if err != nil {
					errc <- fmt.Errorf("writer %d: %w", g, err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		j := s.Journal("runner")
		cursor := int64(-1)
		for k := range batches {
			out, _, err := catchUp(ctx, j, &cursor, eventlog.Batch(mark(writers, k, 0), mark(writers, k, 1)))
			if err == nil {
				err = record(out)
			}
			if err != nil {
				errc <- fmt.Errorf("runner: %w", err)
				return
			}
		}
	})
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	evs := all(t, s.Journal(""))
	if want := (writers + 1) * batches * 2; len(evs) != want || len(committed) != want {
		t.Fatalf("the log has %d events and appends returned %d, want %d", len(evs), len(committed), want)
	}
	seen := map[[2]int]bool{}
	for i := 0; i < len(evs); i += 2 {
		var m0, m1 map[string]int
		if json.Unmarshal(evs[i].Data, &m0) != nil || json.Unmarshal(evs[i+1].Data, &m1) != nil ||
			m0["p"] != 0 || m1["p"] != 1 || m0["g"] != m1["g"] || m0["k"] != m1["k"] {
			t.Fatalf("seqs %d and %d are not one batch: %s, %s", i, i+1, evs[i].Data, evs[i+1].Data)
		}
		key := [2]int{m0["g"], m0["k"]}
		if seen[key] {
			t.Fatalf("batch %v committed twice", key)
		}
		seen[key] = true
	}
	for _, ev := range evs {
		if !sameEvent(ev, committed[ev.Seq]) {
			t.Fatalf("seq %d: log has %s, append returned %s", ev.Seq, show(ev), show(committed[ev.Seq]))
		}
	}
}

// sinceOrderAndBytes: Since returns the events with seq > after, in order, each exactly as
// Append returned it: data byte for byte, times (also a batch mixing given and stamped times),
// surface markers and sources (nil and empty kept apart), ignorable.
func sinceOrderAndBytes(t *testing.T, s Session) {
	ctx := testCtx(t)
	j := s.Journal("")
	var committed []eventlog.Event
	add := func(build eventlog.BuildFunc) []eventlog.Event {
		out := mustAppend(t, j, build)
		committed = append(committed, out...)
		return out
	}
	first := add(eventlog.Batch(
		raw(eventlog.TypeTurnStart, "{ \"turn\" : 1, \"big\": 123456789012345678901234567890, \"f\": 1.50, \"s\": \"\\ud83d\\ude00 é \\u00e9\" }"),
		stepStart(1, 1)))
	if want := `{"turn":1,"big":123456789012345678901234567890,"f":1.50,"s":"\ud83d\ude00 é \u00e9"}`; string(first[0].Data) != want {
		t.Fatalf("committed data %s, want %s", first[0].Data, want)
	}
	am := llm.Message{ID: "a1", Role: "assistant", Content: []llm.Block{llm.TextBlock("ok")},
		Source: llm.Source{Kind: "model", Provider: "p", Model: "m"}}
	call := add(eventlog.Batch(user("u1", "hi <b>&</b>"),
		eventlog.NewEvent{Type: eventlog.TypeAssistantMessage, SurfaceOp: eventlog.Append, SourceEventSeqs: []int64{},
			Data: map[string]any{"turn": 1, "step": 1, "message": am}},
		typed(eventlog.TypeToolCall, map[string]any{"turn": 1, "step": 1, "callId": "c1", "name": "echo", "arguments": `{"x": 1}`})))
	callSeq := last(call)
	add(func(h eventlog.Head) ([]eventlog.NewEvent, error) {
		return []eventlog.NewEvent{{Type: eventlog.TypeToolResult, SurfaceOp: eventlog.Append, SourceEventSeqs: []int64{callSeq},
			Data: map[string]any{"turn": 1, "step": 1,
				"message": llm.NewToolResultMessage("r1", "c1", []llm.Block{llm.TextBlock("done")}, false)}}}, nil
	})
	const given = int64(1234567)
	mixed := add(eventlog.Batch(
		eventlog.NewEvent{Type: "vendor-x/note", Data: json.RawMessage(`{"t":"given"}`), Ignorable: true, Time: given},
		eventlog.NewEvent{Type: "vendor-x/note", Data: json.RawMessage(`{"t":"stamped"}`), Ignorable: true}))
	if mixed[0].Time != given || mixed[1].Time == given || mixed[1].Time <= 0 {
		t.Fatalf("committed times %d, %d; want %d and the append's time", mixed[0].Time, mixed[1].Time, given)
	}
	add(eventlog.Batch(stepEnd(1, 1), turnEnd(1)))

	for after := int64(-2); after <= int64(len(committed))+1; after++ {
		evs, err := j.Since(ctx, after)
		if err != nil {
			t.Fatalf("since %d: %v", after, err)
		}
		want := committed[min(max(after+1, 0), int64(len(committed))):]
		if len(evs) != len(want) {
			t.Fatalf("Since(%d) returned seqs %v, want %v", after, seqs(evs), seqs(want))
		}
		for i := range evs {
			if !sameEvent(evs[i], want[i]) {
				t.Fatalf("Since(%d)[%d] = %s, committed %s", after, i, show(evs[i]), show(want[i]))
			}
		}
	}
	if err := eventlog.CheckInvariants(committed); err != nil {
		t.Fatal(err)
	}
}

// deletedSession: the journals of a deleted session refuse appends and reads with ErrNotFound;
// Wait does not report news.
func deletedSession(t *testing.T, s Session) {
	d, ok := s.(Deleter)
	if !ok {
		t.Skip("the harness's sessions cannot be deleted")
	}
	ctx := testCtx(t)
	acquire(t, s, "runner", time.Minute)
	w, r := s.Journal(""), s.Journal("runner")
	mustAppend(t, r, eventlog.Batch(mark(0, 0, 0)))
	out := mustAppend(t, w, eventlog.Batch(mark(0, 1, 0)))
	d.Delete()
	for i, j := range []eventlog.Journal{w, r, s.Journal(""), s.Journal("runner")} {
		if _, err := j.Append(ctx, eventlog.Batch(mark(1, i, 0))); !errors.Is(err, eventlog.ErrNotFound) {
			t.Fatalf("journal %d: append to a deleted session: %v, want ErrNotFound", i, err)
		}
		if evs, err := j.Since(ctx, -1); !errors.Is(err, eventlog.ErrNotFound) {
			t.Fatalf("journal %d: since on a deleted session: %v, %v; want ErrNotFound", i, seqs(evs), err)
		}
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		err := j.Wait(wctx, last(out))
		cancel()
		if err == nil {
			t.Fatalf("journal %d: Wait(%d) on a deleted session reported news", i, last(out))
		}
	}
}

// Comparison.

func sameEvents(a, b []eventlog.Event) bool {
	return slices.EqualFunc(a, b, sameEvent)
}

// sameEvent reports whether a and b are the same event, down to the bytes of the data and the
// difference between no sources and an empty list.
func sameEvent(a, b eventlog.Event) bool {
	if a.Type != b.Type || a.Seq != b.Seq || a.Time != b.Time || a.Ignorable != b.Ignorable ||
		!bytes.Equal(a.Data, b.Data) {
		return false
	}
	if (a.SurfaceOp == nil) != (b.SurfaceOp == nil) || a.SurfaceOp != nil && *a.SurfaceOp != *b.SurfaceOp {
		return false
	}
	return (a.SourceEventSeqs == nil) == (b.SourceEventSeqs == nil) && slices.Equal(a.SourceEventSeqs, b.SourceEventSeqs)
}

func show(ev eventlog.Event) string {
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Sprintf("%+v", ev)
	}
	return string(b)
}
