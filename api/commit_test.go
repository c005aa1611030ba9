package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/registry"
)

type noteArgs struct {
	Text string `json:"text" jsonschema:"required"`
}

// TestToolBodyCommitIsSeenBeforeItsResult: a tool body commits an event while it runs
// (registry.Execution.Commit) and then waits until a client has seen that event over SSE; only
// then does it return. The stream shows the event before the call's tool/result, and the turn
// completes: events written from inside a call are durable and followed while the call runs.
func TestToolBodyCommitIsSeenBeforeItsResult(t *testing.T) {
	t.Parallel()
	seen := make(chan struct{})
	note, err := registry.Define(registry.DefineSpec[noteArgs, string]{
		Name: "note", Description: "Log a note, then wait until a client saw it.",
	}, func(ctx context.Context, exec *registry.Execution, a noteArgs) (string, error) {
		if _, err := exec.Commit(ctx, eventlog.NewEvent{Type: "test/note", Ignorable: true,
			Data: map[string]string{"callId": exec.CallID, "text": a.Text}}); err != nil {
			return "", err
		}
		select {
		case <-seen:
			return "noted", nil
		case <-time.After(20 * time.Second):
			return "", registry.NewError("TestError", "NOT_SEEN", "no client saw the note")
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvTools(t, "", []*registry.Tool{note})
	sid := e.sessionOfPreset(t, e.keyA, `{"name":"p","model":{"provider":"scripted","model":"s"}}`)
	s := postStream(t, e.replica, sid, e.keyA, `{"content":"tool:note args:{\"text\":\"hello\"}"}`)
	var got []eventlog.Event
	for {
		f := s.next(t)
		var ev eventlog.Event
		if err := json.Unmarshal([]byte(f.data), &ev); err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
		if ev.Type == "tool/result" {
			t.Fatalf("tool/result before the note: %v", types(got))
		}
		if ev.Type == "test/note" {
			var d map[string]string
			if json.Unmarshal(ev.Data, &d); d["text"] != "hello" {
				t.Fatalf("note = %s", ev.Data)
			}
			close(seen)
			break
		}
	}
	rest := s.untilEnd(t)
	all := append(got, rest...)
	if last := all[len(all)-1]; last.Type != "turn/end" || !strings.Contains(string(last.Data), `"completed"`) {
		t.Fatalf("turn ended %s %s", last.Type, last.Data)
	}
	if err := eventlog.CheckInvariants(e.allEvents(t, sid)); err != nil {
		t.Fatal(err)
	}
}
