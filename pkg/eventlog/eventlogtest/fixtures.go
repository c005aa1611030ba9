package eventlogtest

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

// Builders of the events the log tests append (the eventlog and pgstore rule tests share them),
// and readers of the reference logs in pkg/eventlog/testdata.

func UserMsg(id, text string) llm.Message { return llm.NewUserMessage(id, text) }

func NE(typ string, data any) eventlog.NewEvent { return eventlog.NewEvent{Type: typ, Data: data} }

func Raw(typ, data string) eventlog.NewEvent {
	return eventlog.NewEvent{Type: typ, Data: json.RawMessage(data)}
}

func TurnStart(n int) eventlog.NewEvent { return NE("turn/start", map[string]int{"turn": n}) }
func TurnEnd(n int) eventlog.NewEvent {
	return NE("turn/end", map[string]any{"turn": n, "reason": map[string]string{"kind": "completed"}})
}
func StepStart(t, s int) eventlog.NewEvent {
	return NE("step/start", map[string]int{"turn": t, "step": s})
}
func StepEnd(t, s int) eventlog.NewEvent { return NE("step/end", map[string]int{"turn": t, "step": s}) }

func User(id, text string) eventlog.NewEvent {
	return eventlog.NewEvent{Type: "user/message", Data: UserMsg(id, text), SurfaceOp: eventlog.Append}
}

func AssistantMsg(id string, blocks ...llm.Block) llm.Message {
	if blocks == nil {
		blocks = []llm.Block{}
	}
	return llm.Message{ID: id, Role: "assistant", Content: blocks,
		Source: llm.Source{Kind: "model", Provider: "p", Model: "m"}}
}

func Assistant(t, s int, m llm.Message, sources ...int64) eventlog.NewEvent {
	if sources == nil {
		sources = []int64{}
	}
	return eventlog.NewEvent{Type: "assistant/message", SurfaceOp: eventlog.Append, SourceEventSeqs: sources,
		Data: map[string]any{"turn": t, "step": s, "message": m}}
}

func ToolCall(t, s int, id string) eventlog.NewEvent {
	return NE("tool/call", map[string]any{"turn": t, "step": s, "callId": id, "name": "echo", "arguments": "{}"})
}

func ToolResult(t, s int, msgID, callID, text string, callSeq int64) eventlog.NewEvent {
	return eventlog.NewEvent{Type: "tool/result", SurfaceOp: eventlog.Append, SourceEventSeqs: []int64{callSeq},
		Data: map[string]any{"turn": t, "step": s,
			"message": llm.NewToolResultMessage(msgID, callID, []llm.Block{llm.TextBlock(text)}, false)}}
}

// mustAppend appends to an in-memory log and fails the test on error.
func MustAppend(t testing.TB, l *eventlog.Log, evs ...eventlog.NewEvent) []eventlog.Event {
	t.Helper()
	out, err := l.Append(evs...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// wantRule asserts err is a *ValidationError for rule.
func WantRule(t testing.TB, err error, rule string) {
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
func ReferenceLogs(t testing.TB, dir string) map[string][]eventlog.Event {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
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
func AsNew(ev eventlog.Event) eventlog.NewEvent {
	return eventlog.NewEvent{Type: ev.Type, Data: ev.Data, SurfaceOp: ev.SurfaceOp,
		SourceEventSeqs: ev.SourceEventSeqs, Ignorable: ev.Ignorable}
}
