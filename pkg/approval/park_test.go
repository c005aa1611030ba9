package approval

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
)

// turnLog is a turn's committed events in memory, the Recorder a runner gives its calls.
type turnLog struct {
	mu  sync.Mutex
	evs []eventlog.Event
}

func (l *turnLog) Commit(ctx context.Context, evs ...eventlog.NewEvent) ([]eventlog.Event, error) {
	var out []eventlog.Event
	err := l.CommitFunc(ctx, func([]eventlog.Event) ([]eventlog.NewEvent, error) { return evs, nil })
	return out, err
}

func (l *turnLog) CommitFunc(_ context.Context, build func(turn []eventlog.Event) ([]eventlog.NewEvent, error)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	news, err := build(append([]eventlog.Event(nil), l.evs...))
	if err != nil {
		return err
	}
	for _, n := range news {
		data, err := json.Marshal(n.Data)
		if err != nil {
			return err
		}
		l.evs = append(l.evs, eventlog.Event{Seq: int64(len(l.evs) + 1), Type: n.Type, Data: data})
	}
	return nil
}

func (l *turnLog) append(p eventlog.Payload) {
	_ = l.CommitFunc(context.Background(), func([]eventlog.Event) ([]eventlog.NewEvent, error) {
		return []eventlog.NewEvent{eventlog.Of(p)}, nil
	})
}

func parkEnv(t *testing.T) (*registry.Registry, *Service) {
	k := kernel.New(nil)
	r, err := registry.New(registry.Config{Scopes: k.Scopes()})
	if err != nil {
		t.Fatal(err)
	}
	g := k.Fiber("global", nil)
	tool := &registry.Tool{Name: "t", Output: &registry.Output{Render: func(_, v json.RawMessage) ([]llm.Block, error) {
		return []llm.Block{llm.TextBlock(string(v))}, nil
	}}, Execute: func(context.Context, *registry.Execution) (json.RawMessage, error) { return json.RawMessage(`1`), nil }}
	if _, err := r.Register(g, tool); err != nil {
		t.Fatal(err)
	}
	if _, err := kernel.Listen(g, r.Hooks.PreExecute, func(context.Context, *registry.Execution, func(context.Context) (registry.Decision, error)) (registry.Decision, error) {
		return registry.Ask("check"), nil
	}); err != nil {
		t.Fatal(err)
	}
	s := New(Config{})
	r.MountApprover(s)
	return r, s
}

// TestE6_ParkedAsk: a parkable ask commits approval/asked and parks; the resume takes the
// logged decision, or decides cancelled when there is none.
func TestE6_ParkedAsk(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ answer, want string }{
		{eventlog.ApprovalAllowedOnce, ""},
		{eventlog.ApprovalRejected, "ApprovalRejectedError"},
		{"", "ApprovalCancelledError"},
	} {
		r, _ := parkEnv(t)
		log := &turnLog{}
		in := registry.Input{CallID: "c1", Name: "t", Args: json.RawMessage(`{}`), Agent: "a", Log: log, Park: true}
		ctx := context.Background()
		if p := r.Prepare(ctx, in); p.Kind != registry.PrepPark {
			t.Fatalf("kind %v", p.Kind)
		}
		asks := Pending(log.evs)
		if len(asks) != 1 || asks[0].CallID != "c1" {
			t.Fatalf("asks %+v", asks)
		}
		if tc.answer != "" {
			log.append(eventlog.ApprovalDecided{ID: asks[0].ID, Outcome: tc.answer})
		}
		in.Resumed = &registry.Resumed{Ask: &registry.ResumedAsk{Reason: "check"}}
		res := r.Finish(ctx, r.Prepare(ctx, in))
		name := ""
		if info := res.ErrorInfo(); info != nil {
			name = info.Name
		}
		if name != tc.want {
			t.Fatalf("%q: got %q %+v", tc.answer, name, res.Error)
		}
		if len(Pending(log.evs)) != 0 {
			t.Fatalf("%q: still pending", tc.answer)
		}
	}
}
