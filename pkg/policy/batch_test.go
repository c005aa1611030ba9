package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/policy"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/scheduler"
)

// step is a real registry with a parallel tool `par` and an exclusive tool `ex` (both echo
// {text}), a preset scope with a policies block installed, and a scheduler wired with the set's
// group hook, as pkg/agents wires them.
type step struct {
	t     *testing.T
	r     *registry.Registry
	sched *scheduler.Scheduler
}

func newStep(t *testing.T, block string, env policy.Env) *step {
	t.Helper()
	k := kernel.New(nil)
	r, err := registry.New(registry.Config{Scopes: k.Scopes()})
	if err != nil {
		t.Fatal(err)
	}
	type args struct {
		Text string `json:"text"`
	}
	g := k.Fiber("global", nil)
	for _, safe := range []bool{true, false} {
		name := map[bool]string{true: "par", false: "ex"}[safe]
		tl, err := registry.Define(registry.DefineSpec[args, string]{Name: name, Description: name, ConcurrencySafe: safe},
			func(_ context.Context, _ *registry.Execution, a args) (string, error) { return a.Text, nil })
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Register(g, tl); err != nil {
			t.Fatal(err)
		}
	}
	s, err := k.Scopes().Declare(scope, nil)
	if err != nil {
		t.Fatal(err)
	}
	var p policy.Policies
	if err := json.Unmarshal([]byte(block), &p); err != nil {
		t.Fatal(err)
	}
	p.Normalize()
	set, err := policy.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Install(k.Fiber(scope, s), r, env); err != nil {
		t.Fatal(err)
	}
	return &step{t: t, r: r, sched: scheduler.New(r, scheduler.Config{GroupFunc: set.GroupFunc(env)})}
}

// run runs calls ("par:text" or "ex:text", ids c0, c1, …) as one step and returns the results'
// texts in model order.
func (s *step) run(em *recorder, calls ...string) []string {
	s.t.Helper()
	var cs []scheduler.Call
	for i, c := range calls {
		name, text, _ := strings.Cut(c, ":")
		args, _ := json.Marshal(map[string]string{"text": text})
		cs = append(cs, scheduler.Call{ID: fmt.Sprintf("c%d", i), Name: name, Arguments: string(args)})
	}
	out, err := s.sched.RunStep(context.Background(), scheduler.Step{Turn: 1, Step: 1, Agent: "agent-1", Scope: scope}, cs, em)
	if err != nil {
		s.t.Fatal(err)
	}
	var texts []string
	for _, r := range out.Results {
		texts = append(texts, text(r.Result))
	}
	return texts
}

// recorder is the scheduler's emitter in memory: it counts the tool/call events.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) ToolCall(_ context.Context, c scheduler.Call) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c.ID)
	return int64(len(r.calls)), nil
}
func (r *recorder) ToolResult(context.Context, scheduler.Call, int64, *registry.Result) error {
	return nil
}
func (r *recorder) Contexts(context.Context, scheduler.Call, []llm.Message) error { return nil }
func (r *recorder) Flush(context.Context) error                                   { return nil }

func (r *recorder) started() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// receiver is a real HTTP policy webhook: it records each request's call ids and how many
// tool/call events the step had emitted when it arrived, and answers with decide.
type receiver struct {
	mu     sync.Mutex
	em     *recorder
	groups [][]string
	at     []int
	bad    []string
	decide func(policy.BatchCall) *policy.BatchDecision // nil: no decision for the call
}

func (h *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req policy.BatchRequest
	h.mu.Lock()
	if err := policy.Verify(secret, r.Header.Get(policy.HeaderSignature), body, time.Now(), time.Minute); err != nil {
		h.bad = append(h.bad, err.Error())
	}
	if json.Unmarshal(body, &req) != nil || req.Event != policy.EventPreExecuteBatch ||
		r.Header.Get(policy.HeaderEvent) != policy.EventPreExecuteBatch || req.SessionID != "agent-1" || req.Turn != 1 || req.Step != 1 {
		h.bad = append(h.bad, string(body))
	}
	var ids []string
	for _, c := range req.Calls {
		ids = append(ids, c.CallID)
	}
	h.groups = append(h.groups, ids)
	h.at = append(h.at, h.em.started())
	decide := h.decide
	h.mu.Unlock()
	ans := policy.BatchAnswer{Decisions: []policy.BatchDecision{}}
	for _, c := range req.Calls {
		if d := decide(c); d != nil {
			ans.Decisions = append(ans.Decisions, *d)
		}
	}
	if r.Context().Err() == nil {
		_ = json.NewEncoder(w).Encode(ans)
	}
}

// serve starts h and returns the policies block naming it (%s in block is its URL).
func (h *receiver) serve(t *testing.T, block string) (string, policy.Env) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	client := policy.NewClient(policy.ClientConfig{AllowHTTP: true, AllowPrivate: true})
	return fmt.Sprintf(block, srv.URL+"/pre"), policy.Env{Client: client, Secret: secret, PresetID: "p1", PresetVersion: 1}
}

// echoDecision allows a call whose text is not "no" and denies the others with a reason.
func echoDecision(c policy.BatchCall) *policy.BatchDecision {
	var a struct{ Text string }
	_ = json.Unmarshal(c.Arguments, &a)
	if a.Text == "no" {
		return &policy.BatchDecision{CallID: c.CallID, PreAnswer: policy.PreAnswer{Decision: "deny", Reason: "not " + c.CallID}}
	}
	return &policy.BatchDecision{CallID: c.CallID, PreAnswer: policy.PreAnswer{Decision: "allow"}}
}

func ids(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("c%d", i))
	}
	return out
}

// TestE5_OneWebhookRequestForAGroupOf64ParallelCalls: issue 18 found that the pre-execute
// webhook was asked once per call, one after another; a group of 64 parallel calls (a rolling
// pool of 10) is now one request, sent when the group's first prepare begins (after its first
// tool/call, before the second), carrying the 64 calls in model order; each call is decided by
// its entry of the answer.
func TestE5_OneWebhookRequestForAGroupOf64ParallelCalls(t *testing.T) {
	t.Parallel()
	em := &recorder{}
	h := &receiver{em: em, decide: echoDecision}
	block, env := h.serve(t, `{"webhooks":{"preExecute":%q}}`)
	s := newStep(t, block, env)
	var calls, want []string
	for i := range 64 {
		text := "ok"
		if i%7 == 3 {
			text = "no"
		}
		calls = append(calls, "par:"+text)
		want = append(want, map[bool]string{true: "Error: not " + fmt.Sprintf("c%d", i), false: "ok"}[text == "no"])
	}
	got := s.run(em, calls...)
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.bad) > 0 || len(h.groups) != 1 || !slices.Equal(h.groups[0], ids(0, 64)) || h.at[0] != 1 {
		t.Fatalf("requests %v (sent after %v tool/call events), bad %v", h.groups, h.at, h.bad)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("results %q, want %q", got, want)
	}
}

// TestE5_OneWebhookRequestPerGroup: the steps [parallel, exclusive, parallel] are three SCHED-2
// groups and three requests, each sent when its group's first prepare begins; a call a
// pre-execute rule decides is in no request, and a group whose calls the rules all decide
// sends none.
func TestE5_OneWebhookRequestPerGroup(t *testing.T) {
	t.Parallel()
	em := &recorder{}
	h := &receiver{em: em, decide: echoDecision}
	block, env := h.serve(t, `{"preExecute":[{"tools":["*"],"match":{"text":"^rule"},"decision":"deny","reason":"by rule"}],
		"webhooks":{"preExecute":%q}}`)
	s := newStep(t, block, env)
	got := s.run(em, "par:a", "par:rule", "par:no", "ex:b", "par:rule", "par:c", "par:d", "ex:rule")
	want := []string{"a", "Error: by rule", "Error: not c2", "b", "Error: by rule", "c", "d", "Error: by rule"}
	h.mu.Lock()
	defer h.mu.Unlock()
	wantGroups := [][]string{{"c0", "c2"}, {"c3"}, {"c5", "c6"}}
	if len(h.bad) > 0 || fmt.Sprint(h.groups) != fmt.Sprint(wantGroups) || !slices.Equal(h.at, []int{1, 4, 6}) {
		t.Fatalf("requests %v (sent after %v tool/call events), want %v after [1 4 6]; bad %v", h.groups, h.at, wantGroups, h.bad)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("results %q, want %q", got, want)
	}
}

// TestE5_WebhookThatNeverAnswersCostsOneTimeout: with a receiver that never answers and a 1 s
// timeout, the 64 calls of a group are all decided (denied, fail closed) after the one request
// has timed out, not after 64 timeouts one after another (issue 18: 64 calls with a 30 s timeout
// held the turn for 32 minutes). The bound on the elapsed time is loose (64 timeouts would take
// 64 s).
func TestE5_WebhookThatNeverAnswersCostsOneTimeout(t *testing.T) {
	t.Parallel()
	em := &recorder{}
	release := make(chan struct{})
	h := &receiver{em: em, decide: func(policy.BatchCall) *policy.BatchDecision { <-release; return nil }}
	block, env := h.serve(t, `{"webhooks":{"preExecute":%q,"timeoutMs":1000}}`)
	t.Cleanup(func() { close(release) }) // before the server closes (cleanups run last first)
	s := newStep(t, block, env)
	calls := slices.Repeat([]string{"par:ok"}, 64)
	start := time.Now()
	got := s.run(em, calls...)
	elapsed := time.Since(start)
	if elapsed > 20*time.Second {
		t.Fatalf("the step took %v", elapsed)
	}
	want := slices.Repeat([]string{"Error: pre-execute policy webhook failed: the webhook did not answer within 1000ms"}, 64)
	if !slices.Equal(got, want) {
		t.Fatalf("results %q", got)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.groups) != 1 || len(h.groups[0]) != 64 {
		t.Fatalf("requests %v", h.groups)
	}
}

// TestE5_CallTheAnswerDoesNotCoverFailsClosed: a call the answer gives no decision for (or an
// unknown one, or a decision for a call it was not asked about) is denied as a failed request
// is; the calls it covers are decided by their entries.
func TestE5_CallTheAnswerDoesNotCoverFailsClosed(t *testing.T) {
	t.Parallel()
	em := &recorder{}
	h := &receiver{em: em, decide: func(c policy.BatchCall) *policy.BatchDecision {
		switch c.CallID {
		case "c1":
			return &policy.BatchDecision{CallID: "c9", PreAnswer: policy.PreAnswer{Decision: "allow"}}
		case "c2":
			return &policy.BatchDecision{CallID: c.CallID, PreAnswer: policy.PreAnswer{Decision: "maybe"}}
		}
		return echoDecision(c)
	}}
	block, env := h.serve(t, `{"webhooks":{"preExecute":%q}}`)
	s := newStep(t, block, env)
	got := s.run(em, "par:a", "par:b", "par:c", "par:no")
	want := []string{"a",
		`Error: pre-execute policy webhook failed: the webhook's answer has no decision for call "c1" (a "preExecuteBatch" request is answered with {"decisions": [{"callId", "decision", "reason"}, ...]})`,
		`Error: pre-execute policy webhook failed: the webhook answered an unknown decision "maybe" (want "allow", "deny" or "ask")`,
		"Error: not c3"}
	if !slices.Equal(got, want) {
		t.Fatalf("results %q, want %q", got, want)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.groups) != 1 {
		t.Fatalf("requests %v", h.groups)
	}
}
