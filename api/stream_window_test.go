package api_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/registry"
)

// holdArgs are the arguments of the hold tool: the scripted model sends {"text":"step S call C"}
// unless the script gives args.
type holdArgs struct {
	Text string `json:"text"`
}

// hold is a concurrency-safe test tool whose bodies announce their start (with their text) and
// then wait until the test releases them or the call is cancelled.
type hold struct {
	started chan string
	mu      sync.Mutex
	release chan struct{}
}

func newHold(t testing.TB) (*hold, *registry.Tool) {
	t.Helper()
	h := &hold{started: make(chan string, 256), release: make(chan struct{})}
	tool, err := registry.Define(registry.DefineSpec[holdArgs, string]{
		Name: "hold", Description: "Wait until the test releases the call.", ConcurrencySafe: true,
	}, func(ctx context.Context, _ *registry.Execution, a holdArgs) (string, error) {
		h.mu.Lock()
		release := h.release
		h.mu.Unlock()
		h.started <- a.Text
		select {
		case <-release:
			return "released " + a.Text, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return h, tool
}

// TestGatedParallelCallsStreamToTheOtherReplica: a step of four concurrency-safe calls held by the
// test, served by one replica; a client following the session's events on the other replica
// receives turn/start, the step's assistant/message and all four tool/calls while every call is
// still held, and no tool/result before the test releases them (docs/rules.md, log-window).
// Finding (issue 18): the model's finish chunk, its assistant/message and the step's tool/calls
// were staged for the runner's next batch, which came only when the calls returned: a frontend
// showed nothing for the tools' whole duration, and a client that cancelled on the 4th tool/call
// found the turn already over.
func TestGatedParallelCallsStreamToTheOtherReplica(t *testing.T) {
	t.Parallel()
	h, tool := newHold(t)
	e := newEnvTools(t, "", []*registry.Tool{tool})
	serving := e.newReplica() // the latest replica takes this process's commits without a read
	sid := e.sessionOfPreset(t, e.keyA, `{"name":"p","model":{"provider":"scripted","model":"s"}}`)
	s := openStream(t, e.replica.url+"/v1/sessions/"+sid+"/events", e.keyA)
	serving.do(t, "POST", "/v1/sessions/"+sid+"/messages", e.keyA, `{"content":"tools:4 tool:hold"}`).want(t, 202)
	for range 4 {
		<-h.started
	}
	seen := map[string]int{}
	for seen[eventlog.TypeToolCall] < 4 || seen[eventlog.TypeAssistantMessage] < 1 {
		ev := frameEvent(t, s.next(t))
		if ev.Type == eventlog.TypeToolResult {
			t.Fatalf("a tool/result while every call is held: %s", ev.Data)
		}
		seen[ev.Type]++
	}
	if seen[eventlog.TypeTurnStart] != 1 {
		t.Fatalf("streamed %v before the calls' release, want turn/start among them", seen)
	}
	h.mu.Lock()
	close(h.release)
	h.mu.Unlock()
	for {
		ev := frameEvent(t, s.next(t))
		if ev.Type == eventlog.TypeTurnEnd {
			var d eventlog.TurnEnd
			if err := json.Unmarshal(ev.Data, &d); err != nil || d.Reason.Kind != eventlog.EndCompleted {
				t.Fatalf("turn ended %s", ev.Data)
			}
			break
		}
	}
	if err := eventlog.CheckInvariants(e.allEvents(t, sid)); err != nil {
		t.Fatal(err)
	}
}

// frameEvent decodes the event of an SSE frame.
func frameEvent(t testing.TB, f frame) eventlog.Event {
	t.Helper()
	var ev eventlog.Event
	if err := json.Unmarshal([]byte(f.data), &ev); err != nil {
		t.Fatalf("frame %q: %v", f.data, err)
	}
	return ev
}
