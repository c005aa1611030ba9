package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/dshd/dshd/pkg/approval"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/worker"
)

// inboxOf rebuilds the session's inbox from its log.
func (e *env) inboxOf(t *testing.T, sid string) eventlog.Inbox {
	t.Helper()
	var ib eventlog.Inbox
	for _, ev := range e.allEvents(t, sid) {
		if ev.Type == eventlog.TypeInboxSpliced {
			if err := ib.ApplyEvent(ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ib
}

func policyNotices(ib eventlog.Inbox) []llm.Message {
	var out []llm.Message
	for _, m := range append(ib.NextTurn, ib.NextStep...) {
		if m.Source.Kind == llm.SourcePlugin && m.Source.Plugin == approval.NoticePlugin && m.Source.Form == approval.NoticeForm {
			out = append(out, m)
		}
	}
	return out
}

// TestApprovalPolicyNoticeReplacesAnUnreadOne: issue 18 found that 2,000 alternating PUTs of
// the approval policy left 1,203 notices in an inbox bounded at 100, and the owner's next post
// was refused inbox_full. A notice that supersedes an unread one now replaces it: after 2,000
// alternating PUTs (four clients, post rates lifted) the inbox holds one notice, stating the
// policy in force, and the owner's post is accepted.
func TestApprovalPolicyNoticeReplacesAnUnreadOne(t *testing.T) {
	t.Parallel()
	e := newEnvWorker(t, func(c *worker.Config) {
		c.SessionPosts, c.TenantPosts = worker.Rate{PerSecond: -1}, worker.Rate{PerSecond: -1}
	})
	sid := e.sessionOfPreset(t, e.keyA, askEchoPreset)
	path := "/v1/sessions/" + sid + "/approval-policy"
	// The PUTs run on 4 goroutines, which never call t.Fatal (review 18: a transport error
	// panicked or hung the test): each sends its first error back, and the test fails here.
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	errs := make(chan error, 4)
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				p := []string{"ask", "never"}[(c+i)%2]
				st, err := putStatus(e.replica.url+path, e.keyA, `{"policy":"`+p+`"}`)
				if err != nil {
					errs <- fmt.Errorf("PUT %d of goroutine %d: %w", i, c, err)
					return
				}
				mu.Lock()
				statuses[st]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if statuses[http.StatusOK] != 2000 {
		t.Fatalf("statuses %v", statuses)
	}
	ib := e.inboxOf(t, sid)
	notices := policyNotices(ib)
	var set struct{ Policy string }
	last := e.allEvents(t, sid)
	for i := len(last) - 1; i >= 0; i-- {
		if p, ok := approval.PolicyOf(last[i]); ok {
			set.Policy = p
			break
		}
	}
	if len(ib.NextTurn)+len(ib.NextStep) != 1 || len(notices) != 1 || notices[0].Text() != approval.NoticeText(set.Policy) {
		t.Fatalf("inbox %d+%d messages, notices %+v; policy in force %q", len(ib.NextTurn), len(ib.NextStep), notices, set.Policy)
	}
	evs := postStream(t, e.replica, sid, e.keyA, `{"content":"hello"}`).untilEnd(t)
	if evs[len(evs)-1].Type != eventlog.TypeTurnEnd {
		t.Fatalf("the owner's post was not served: %v", evs)
	}
}

// putStatus sends a PUT of body to url with key as the bearer token and returns the status; it
// reports an error instead of failing a test, so that a goroutine may call it.
func putStatus(url, key, body string) (int, error) {
	req, err := http.NewRequest("PUT", url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := harnessClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

// TestApprovalPolicyObeysThePostRates: issue 18 found that PUT approval-policy bypassed the
// posting rates; it now takes a token of the session's bucket as a post does: with a burst of 3
// (and no refill to speak of) the fourth PUT, and a post after it, are 429 rate_limited.
func TestApprovalPolicyObeysThePostRates(t *testing.T) {
	t.Parallel()
	e := newEnvWorker(t, func(c *worker.Config) { c.SessionPosts = worker.Rate{PerSecond: 0.0001, Burst: 3} })
	sid := e.sessionOfPreset(t, e.keyA, askEchoPreset)
	path := "/v1/sessions/" + sid + "/approval-policy"
	for i, p := range []string{"never", "ask", "never"} {
		if st := e.do(t, "PUT", path, e.keyA, `{"policy":"`+p+`"}`).status; st != http.StatusOK {
			t.Fatalf("PUT %d: %d", i, st)
		}
	}
	e.do(t, "PUT", path, e.keyA, `{"policy":"ask"}`).wantProblem(t, http.StatusTooManyRequests, "rate_limited")
	e.do(t, "POST", "/v1/sessions/"+sid+"/messages", e.keyA, `{"content":"hi","mode":"inject"}`).
		wantProblem(t, http.StatusTooManyRequests, "rate_limited")
}

// TestApprovalPolicyObeysTheInboxBound: issue 18 found that PUT approval-policy bypassed the
// inbox bound; at a full inbox it is now refused 429 inbox_full as a post is, and appends
// nothing.
func TestApprovalPolicyObeysTheInboxBound(t *testing.T) {
	t.Parallel()
	e := newEnvWorker(t, func(c *worker.Config) { c.InboxMaxMessages = 2 })
	sid := e.sessionOfPreset(t, e.keyA, askEchoPreset)
	for i := range 2 {
		e.do(t, "POST", "/v1/sessions/"+sid+"/messages", e.keyA, fmt.Sprintf(`{"content":"note %d","mode":"inject"}`, i)).
			want(t, http.StatusAccepted)
	}
	before := len(e.allEvents(t, sid))
	e.do(t, "PUT", "/v1/sessions/"+sid+"/approval-policy", e.keyA, `{"policy":"never"}`).
		wantProblem(t, http.StatusTooManyRequests, "inbox_full")
	if n := len(e.allEvents(t, sid)); n != before {
		t.Fatalf("the refused PUT appended %d events", n-before)
	}
}

// newEnvWorker is newEnv with the replica's worker configuration adjusted by f.
func newEnvWorker(t *testing.T, f func(*worker.Config)) *env {
	t.Helper()
	e := newEnv(t)
	e.worker = f
	e.replica = e.newReplica()
	return e
}

// TestApprovalListReadsArgumentsFromTheCall: approval/asked carries no arguments (APR-3, the
// reference's shape; dshd added them before issue 18), so the pending list reads them from the
// call the ask names: its tool/call, or for a run_code sub-call its tool/code-dispatch-start.
// An ask of an older log keeps the arguments it carried.
func TestApprovalListReadsArgumentsFromTheCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionCreate(t, e.keyA)
	e.appendEvents(sid, turnStart(1), stepStart(1, 1),
		eventlog.Of(eventlog.ApprovalAsked{ID: "old", ToolName: "bash", CallID: "c0", Arguments: []byte(`{"command":"ls"}`)}),
		eventlog.Of(eventlog.ToolCall{Turn: 1, Step: 1, CallID: "c1", Name: "echo", Arguments: `{"text":"one"}`}),
		eventlog.Of(eventlog.ApprovalAsked{ID: "native", ToolName: "echo", CallID: "c1"}),
		eventlog.Of(eventlog.ToolCall{Turn: 1, Step: 1, CallID: "c2", Name: "run_code", Arguments: `{"code":"x"}`}),
		eventlog.Of(eventlog.CodeDispatchStart{RootCallID: "c2", ParentCallID: "c2", SubCallID: "c2:code:1", Name: "echo",
			Arguments: []byte(`{"text":"sub"}`)}),
		eventlog.Of(eventlog.ApprovalAsked{ID: "sub", ToolName: "echo", CallID: "c2:code:1"}))
	var list struct {
		Items []struct {
			ID        string
			Arguments json.RawMessage
		}
	}
	e.do(t, "GET", "/v1/sessions/"+sid.String()+"/approvals", e.keyA, nil).want(t, http.StatusOK).json(t, &list)
	got := map[string]string{}
	for _, it := range list.Items {
		got[it.ID] = string(it.Arguments)
	}
	want := map[string]string{"old": `{"command":"ls"}`, "native": `{"text":"one"}`, "sub": `{"text":"sub"}`}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(list.Items) != 3 {
		t.Fatalf("arguments %v, want %v", got, want)
	}
}
