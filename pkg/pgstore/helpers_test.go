package pgstore_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

func userMsg(id, text string) llm.Message { return llm.NewUserMessage(id, text) }

func ne(typ string, data any) eventlog.NewEvent { return eventlog.NewEvent{Type: typ, Data: data} }

func raw(typ, data string) eventlog.NewEvent {
	return eventlog.NewEvent{Type: typ, Data: json.RawMessage(data)}
}

func turnStart(n int) eventlog.NewEvent { return ne("turn/start", map[string]int{"turn": n}) }
func turnEnd(n int) eventlog.NewEvent {
	return ne("turn/end", map[string]any{"turn": n, "reason": map[string]string{"kind": "completed"}})
}
func stepStart(t, s int) eventlog.NewEvent {
	return ne("step/start", map[string]int{"turn": t, "step": s})
}
func stepEnd(t, s int) eventlog.NewEvent { return ne("step/end", map[string]int{"turn": t, "step": s}) }

func user(id, text string) eventlog.NewEvent {
	return eventlog.NewEvent{Type: "user/message", Data: userMsg(id, text), SurfaceOp: eventlog.Append}
}

func assistantMsg(id string, blocks ...llm.Block) llm.Message {
	if blocks == nil {
		blocks = []llm.Block{}
	}
	return llm.Message{ID: id, Role: "assistant", Content: blocks,
		Source: llm.Source{Kind: "model", Provider: "p", Model: "m"}}
}

func assistant(t, s int, m llm.Message, sources ...int64) eventlog.NewEvent {
	if sources == nil {
		sources = []int64{}
	}
	return eventlog.NewEvent{Type: "assistant/message", SurfaceOp: eventlog.Append, SourceEventSeqs: sources,
		Data: map[string]any{"turn": t, "step": s, "message": m}}
}

func toolCall(t, s int, id string) eventlog.NewEvent {
	return ne("tool/call", map[string]any{"turn": t, "step": s, "callId": id, "name": "echo", "arguments": "{}"})
}

func toolResult(t, s int, msgID, callID, text string, callSeq int64) eventlog.NewEvent {
	return eventlog.NewEvent{Type: "tool/result", SurfaceOp: eventlog.Append, SourceEventSeqs: []int64{callSeq},
		Data: map[string]any{"turn": t, "step": s,
			"message": llm.NewToolResultMessage(msgID, callID, []llm.Block{llm.TextBlock(text)}, false)}}
}

// mustAppend appends to an in-memory log and fails the test on error.
func mustAppend(t testing.TB, l *eventlog.Log, evs ...eventlog.NewEvent) []eventlog.Event {
	t.Helper()
	out, err := l.Append(evs...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// wantRule asserts err is a *ValidationError for rule.
func wantRule(t testing.TB, err error, rule string) {
	t.Helper()
	var ve *eventlog.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error = %v, want a ValidationError for %s", err, rule)
	}
	if ve.Rule != rule {
		t.Fatalf("rule = %s (%v), want %s", ve.Rule, ve, rule)
	}
}

// referenceLogs reads testdata/*.jsonl (logs written by the reference implementation).
func referenceLogs(t testing.TB) map[string][]eventlog.Event {
	t.Helper()
	files, err := filepath.Glob("../eventlog/testdata/*.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no reference logs: %v", err)
	}
	out := map[string][]eventlog.Event{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev eventlog.Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out[filepath.Base(f)] = append(out[filepath.Base(f)], ev)
		}
		fh.Close()
	}
	return out
}

// asNew turns a stored event back into a NewEvent.
func asNew(ev eventlog.Event) eventlog.NewEvent {
	return eventlog.NewEvent{Type: ev.Type, Data: ev.Data, SurfaceOp: ev.SurfaceOp,
		SourceEventSeqs: ev.SourceEventSeqs, Ignorable: ev.Ignorable}
}

// appendEvents appends evs to the session through an unfenced journal, as an HTTP handler does.
func appendEvents(st *pgstore.Store, ctx context.Context, tenant, session uuid.UUID, evs ...eventlog.NewEvent) ([]eventlog.Event, error) {
	return st.Journal(nil, tenant, session, uuid.Nil).Append(ctx, func(eventlog.Head) ([]eventlog.NewEvent, error) {
		return evs, nil
	})
}

// appendTx appends evs inside the caller's transaction.
func appendTx(st *pgstore.Store, ctx context.Context, tx pgx.Tx, tenant, session uuid.UUID, evs ...eventlog.NewEvent) ([]eventlog.Event, error) {
	return st.AppendTx(ctx, tx, tenant, session, func(eventlog.Head) ([]eventlog.NewEvent, error) { return evs, nil })
}

// repair closes the session's open turn as a turn runner does (SES-14): it reads the log,
// computes the closers and appends them through the journal, with the last event's time.
func repair(st *pgstore.Store, ctx context.Context, tenant, session uuid.UUID) ([]eventlog.Event, error) {
	j := st.Journal(nil, tenant, session, uuid.Nil)
	all, err := j.Since(ctx, -1)
	if err != nil {
		return nil, err
	}
	closers := eventlog.Closers(all)
	if len(closers) == 0 {
		return nil, nil
	}
	evs := make([]eventlog.NewEvent, len(closers))
	for i, c := range closers {
		evs[i] = asNew(c)
		evs[i].Time = c.Time
	}
	return j.Append(ctx, func(h eventlog.Head) ([]eventlog.NewEvent, error) {
		if h.Next != closers[0].Seq {
			return nil, eventlog.ErrStale
		}
		return evs, nil
	})
}
