package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/pkg/approval"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
)

// TestApprovalsOverHTTP: a pending approval is listed with its arguments, answered once (a second
// answer is 409, an unknown id 404, a bad outcome 400), and leaves the list once decided.
func TestApprovalsOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionCreate(t, e.keyA)
	e.appendEvents(sid, turnStart(1), stepStart(1, 1),
		eventlog.Of(eventlog.ApprovalAsked{ID: "ap1", ToolName: "bash", CallID: "c1", Reason: "runs a command",
			Arguments: []byte(`{"command":"ls"}`)}))
	path := "/v1/sessions/" + sid.String() + "/approvals"
	var list struct {
		Items []struct {
			ID, ToolName, CallID, Reason string
			Arguments                    map[string]string
		}
	}
	e.do(t, "GET", path, e.keyA, nil).want(t, http.StatusOK).json(t, &list)
	if len(list.Items) != 1 || list.Items[0].ID != "ap1" || list.Items[0].Arguments["command"] != "ls" || list.Items[0].Reason != "runs a command" {
		t.Fatalf("pending %+v", list)
	}
	e.do(t, "POST", path+"/ap1", e.keyA, map[string]string{"outcome": "maybe"}).wantProblem(t, http.StatusBadRequest, "invalid_request")
	e.do(t, "POST", path+"/nope", e.keyA, map[string]string{"outcome": "rejected"}).wantProblem(t, http.StatusNotFound, "not_found")
	var decided struct {
		ID, Outcome string
		Seq         int64
	}
	e.do(t, "POST", path+"/ap1", e.keyA, map[string]string{"outcome": "allowed-once", "reason": "fine"}).want(t, http.StatusOK).json(t, &decided)
	if decided.ID != "ap1" || decided.Outcome != "allowed-once" || decided.Seq != 3 {
		t.Fatalf("decided %+v", decided)
	}
	e.do(t, "POST", path+"/ap1", e.keyA, map[string]string{"outcome": "rejected"}).wantProblem(t, http.StatusConflict, "conflict")
	e.do(t, "GET", path, e.keyA, nil).want(t, http.StatusOK).json(t, &list)
	if len(list.Items) != 0 {
		t.Fatalf("still pending %+v", list)
	}
	// Another tenant sees nothing of it.
	e.do(t, "GET", path, e.keyB, nil).wantProblem(t, http.StatusNotFound, "not_found")
}

// TestAPR_ApprovalAcrossReplicas: a preset that asks before echo; the model calls it; the message
// stream shows approval/asked while the call waits, in the reference's shape (APR-3: without the
// arguments, which dshd added before issue 18); a client that was not following lists the
// pending approval on another replica, with the call's arguments read from its tool/call, and
// answers it there; the tool runs
// and its result reaches the model; a second answer is 409.
func TestAPR_ApprovalAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	other := e.newReplica()
	sid := e.sessionOfPreset(t, e.keyA, `{"name":"ask","model":{"provider":"scripted","model":"s"},
		"approval":{"policy":"ask","ask":["echo"],"timeoutMs":60000}}`)
	s := postStream(t, e.replica, sid, e.keyA, `{"content":"tool:echo args:{\"text\":\"approved\"}"}`)
	var asked eventlog.ApprovalAsked
	for asked.ID == "" {
		var ev eventlog.Event
		if err := json.Unmarshal([]byte(s.next(t).data), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type == "tool/result" {
			t.Fatalf("tool/result before approval/asked")
		}
		if ev.Type == eventlog.TypeApprovalAsked {
			if err := json.Unmarshal(ev.Data, &asked); err != nil {
				t.Fatal(err)
			}
		}
	}
	if asked.ToolName != "echo" || asked.Arguments != nil {
		t.Fatalf("asked %+v, want echo without arguments (APR-3)", asked)
	}
	path := "/v1/sessions/" + sid + "/approvals"
	var list struct {
		Items []struct {
			ID        string
			Arguments json.RawMessage
		}
	}
	other.do(t, "GET", path, e.keyA, nil).want(t, http.StatusOK).json(t, &list)
	if len(list.Items) != 1 || list.Items[0].ID != asked.ID || string(list.Items[0].Arguments) != `{"text":"approved"}` {
		t.Fatalf("pending on the other replica: %+v", list)
	}
	other.do(t, "POST", path+"/"+asked.ID, e.keyA, map[string]string{"outcome": "allowed-once"}).want(t, http.StatusOK)
	rest := s.untilEnd(t)
	var result eventlog.ToolResult
	for _, ev := range rest {
		if ev.Type == "tool/result" {
			_ = json.Unmarshal(ev.Data, &result)
		}
	}
	if result.Message.Content == nil || result.Message.Content[0].IsError || result.Message.Content[0].Content[0].Text != "approved" {
		t.Fatalf("result %+v", result)
	}
	if last := rest[len(rest)-1]; last.Type != "turn/end" || !strings.Contains(string(last.Data), "completed") {
		t.Fatalf("turn ended %s", last.Data)
	}
	other.do(t, "POST", path+"/"+asked.ID, e.keyA, map[string]string{"outcome": "rejected"}).wantProblem(t, http.StatusConflict, "conflict")
	if err := eventlog.CheckInvariants(e.allEvents(t, sid)); err != nil {
		t.Fatal(err)
	}
}

// TestAPR_ReconnectSeesAndAnswersThePendingApproval: a client whose stream drops while an
// approval is pending reconnects with Last-Event-ID, sees the approval/asked again, answers it,
// and follows the turn to its end on the new stream.
func TestAPR_ReconnectSeesAndAnswersThePendingApproval(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionOfPreset(t, e.keyA, `{"name":"ask","model":{"provider":"scripted","model":"s"},
		"approval":{"policy":"ask","ask":["echo"],"timeoutMs":60000}}`)
	s := postStream(t, e.replica, sid, e.keyA, `{"content":"tool:echo args:{\"text\":\"after-reconnect\"}"}`)
	var asked eventlog.Event
	for asked.Type != eventlog.TypeApprovalAsked {
		if err := json.Unmarshal([]byte(s.next(t).data), &asked); err != nil {
			t.Fatal(err)
		}
	}
	s.resp.Body.Close() // the connection drops

	again := openStream(t, e.replica.url+"/v1/sessions/"+sid+"/events", e.keyA,
		"Last-Event-ID", strconv.FormatInt(asked.Seq-1, 10))
	var first eventlog.Event
	if err := json.Unmarshal([]byte(again.next(t).data), &first); err != nil {
		t.Fatal(err)
	}
	if first.Seq != asked.Seq || first.Type != eventlog.TypeApprovalAsked || string(first.Data) != string(asked.Data) {
		t.Fatalf("resumed at %s #%d %s, want the pending approval #%d %s", first.Type, first.Seq, first.Data, asked.Seq, asked.Data)
	}
	var a eventlog.ApprovalAsked
	if err := json.Unmarshal(first.Data, &a); err != nil {
		t.Fatal(err)
	}
	e.do(t, "POST", "/v1/sessions/"+sid+"/approvals/"+a.ID, e.keyA, map[string]string{"outcome": "allowed-once"}).want(t, http.StatusOK)
	var result eventlog.ToolResult
	for {
		var ev eventlog.Event
		if err := json.Unmarshal([]byte(again.next(t).data), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type == eventlog.TypeToolResult {
			_ = json.Unmarshal(ev.Data, &result)
		}
		if ev.Type == eventlog.TypeTurnEnd {
			if !strings.Contains(string(ev.Data), "completed") {
				t.Fatalf("turn ended %s", ev.Data)
			}
			break
		}
	}
	if result.Message.Content == nil || result.Message.Content[0].IsError || result.Message.Content[0].Content[0].Text != "after-reconnect" {
		t.Fatalf("result %+v", result)
	}
}

// TestAPR4_TimeoutOverHTTPEndsCancelled: an approval nobody answers within the preset's
// approval.timeoutMs is decided `cancelled`, the call fails without running, the turn still
// ends, and nothing is left pending.
func TestAPR4_TimeoutOverHTTPEndsCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionOfPreset(t, e.keyA, `{"name":"ask","model":{"provider":"scripted","model":"s"},
		"approval":{"policy":"ask","ask":["echo"],"timeoutMs":200}}`)
	evs := postStream(t, e.replica, sid, e.keyA, `{"content":"tool:echo args:{\"text\":\"never\"}"}`).untilEnd(t)
	var decided eventlog.ApprovalDecided
	var result eventlog.ToolResult
	for _, ev := range evs {
		switch ev.Type {
		case eventlog.TypeApprovalDecided:
			_ = json.Unmarshal(ev.Data, &decided)
		case eventlog.TypeToolResult:
			_ = json.Unmarshal(ev.Data, &result)
		}
	}
	if decided.Outcome != "cancelled" {
		t.Fatalf("decided %+v, want cancelled", decided)
	}
	if result.Message.Content == nil || !result.Message.Content[0].IsError || strings.Contains(fmt.Sprint(result.Message.Content), "never") {
		t.Fatalf("result %+v, want a failure without the tool's output", result)
	}
	if last := evs[len(evs)-1]; last.Type != eventlog.TypeTurnEnd {
		t.Fatalf("the stream ended with %s", last.Type)
	}
	var list struct{ Items []struct{ ID string } }
	e.do(t, "GET", "/v1/sessions/"+sid+"/approvals", e.keyA, nil).want(t, http.StatusOK).json(t, &list)
	if len(list.Items) != 0 {
		t.Fatalf("pending after the timeout: %+v", list.Items)
	}
	if err := eventlog.CheckInvariants(e.allEvents(t, sid)); err != nil {
		t.Fatal(err)
	}
}

func init() { contractExtras = append(contractExtras, approvalPolicyContract) }

// approvalPolicyContract checks PUT /v1/sessions/{id}/approval-policy against openapi.yaml.
func approvalPolicyContract(t *testing.T, e *env, c *contract, sid, _ string) {
	path := "/v1/sessions/" + sid + "/approval-policy"
	const op = "/v1/sessions/{id}/approval-policy"
	c.check("PUT", op, e.do(t, "PUT", path, e.keyA, `{"policy":"sometimes"}`).want(t, 400))
	c.check("PUT", op, e.do(t, "PUT", path, e.keyB, `{"policy":"never"}`).want(t, 404))
	c.check("PUT", op, e.do(t, "PUT", path, "", `{"policy":"never"}`).want(t, 401))
	c.check("PUT", op, e.do(t, "PUT", path, e.keyA, `{"policy":"ask"}`).want(t, 200))
}

// askEchoPreset asks before every echo call, with a long timeout.
const askEchoPreset = `{"name":"ask","model":{"provider":"scripted","model":"s"},
	"approval":{"policy":"ask","ask":["echo"],"timeoutMs":60000}}`

// untilAsked reads s up to its next approval/asked and returns it with the tool results seen
// before it. It fails the test when the turn ends first.
func untilAsked(t *testing.T, s *rawStream) (eventlog.ApprovalAsked, []eventlog.ToolResult) {
	t.Helper()
	var results []eventlog.ToolResult
	for {
		var ev eventlog.Event
		if err := json.Unmarshal([]byte(s.next(t).data), &ev); err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case eventlog.TypeToolResult:
			var tr eventlog.ToolResult
			if err := json.Unmarshal(ev.Data, &tr); err != nil {
				t.Fatal(err)
			}
			results = append(results, tr)
		case eventlog.TypeApprovalAsked:
			var a eventlog.ApprovalAsked
			if err := json.Unmarshal(ev.Data, &a); err != nil {
				t.Fatal(err)
			}
			return a, results
		case eventlog.TypeTurnEnd:
			t.Fatalf("the turn ended (%s) without another approval/asked", ev.Data)
		}
	}
}

// toolResults returns the tool results among evs.
func toolResults(t *testing.T, evs []eventlog.Event) []eventlog.ToolResult {
	t.Helper()
	var out []eventlog.ToolResult
	for _, ev := range evs {
		if ev.Type == eventlog.TypeToolResult {
			var tr eventlog.ToolResult
			if err := json.Unmarshal(ev.Data, &tr); err != nil {
				t.Fatal(err)
			}
			out = append(out, tr)
		}
	}
	return out
}

// TestAPR5_AllowedOnceCoversOnlyThatCall: grants are one-shot. An allowed-once answer lets its
// one call run; the next call of the same tool with the same arguments, later in the same turn,
// asks again (a second approval/asked, with another id and call), and so does a call in the next
// turn. There is no "allow always": an answer with any outcome but allowed-once or rejected is
// refused with 400 problem+json and leaves the approval pending.
func TestAPR5_AllowedOnceCoversOnlyThatCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionOfPreset(t, e.keyA, askEchoPreset)
	path := "/v1/sessions/" + sid + "/approvals"
	answer := func(id, outcome string) {
		t.Helper()
		e.do(t, "POST", path+"/"+id, e.keyA, map[string]string{"outcome": outcome}).want(t, http.StatusOK)
	}

	s := postStream(t, e.replica, sid, e.keyA, `{"content":"steps:2 tool:echo args:{\"text\":\"again\"}"}`)
	first, before := untilAsked(t, s)
	if len(before) != 0 {
		t.Fatalf("results before the first approval: %+v", before)
	}
	for _, outcome := range []string{"allowed-always", "allow-always", "allowed", "cancelled", ""} {
		e.do(t, "POST", path+"/"+first.ID, e.keyA, map[string]string{"outcome": outcome}).wantProblem(t, http.StatusBadRequest, "invalid_request")
	}
	var list struct{ Items []struct{ ID string } }
	e.do(t, "GET", path, e.keyA, nil).want(t, http.StatusOK).json(t, &list)
	if len(list.Items) != 1 || list.Items[0].ID != first.ID {
		t.Fatalf("pending after the refused answers: %+v, want %s", list.Items, first.ID)
	}
	answer(first.ID, "allowed-once")

	second, ran := untilAsked(t, s)
	if len(ran) != 1 || ran[0].Message.Content[0].IsError || ran[0].Message.Content[0].Content[0].Text != "again" {
		t.Fatalf("the allowed call's result: %+v", ran)
	}
	if second.ID == first.ID || second.CallID == first.CallID || second.ToolName != "echo" ||
		string(second.Arguments) != string(first.Arguments) {
		t.Fatalf("second ask %+v after %+v, want a new ask of another call with the same arguments", second, first)
	}
	answer(second.ID, "rejected")
	rest := s.untilEnd(t)
	res := toolResults(t, rest)
	if len(res) != 1 || res[0].Error == nil || res[0].Error.Code != fault.CodeApprovalRejected {
		t.Fatalf("the second call's result %+v, want it rejected", res)
	}

	// The next turn asks again too.
	s = postStream(t, e.replica, sid, e.keyA, `{"content":"tool:echo args:{\"text\":\"again\"}"}`)
	third, _ := untilAsked(t, s)
	if third.ID == first.ID || third.ID == second.ID {
		t.Fatalf("third ask %+v reuses an earlier id", third)
	}
	answer(third.ID, "allowed-once")
	if res := toolResults(t, s.untilEnd(t)); len(res) != 1 || res[0].Message.Content[0].IsError {
		t.Fatalf("next turn's result %+v", res)
	}
	asks := 0
	for _, ev := range e.allEvents(t, sid) {
		if ev.Type == eventlog.TypeApprovalAsked {
			asks++
		}
	}
	if asks != 3 {
		t.Fatalf("%d approval/asked in the log, want one per call (3)", asks)
	}
	if err := eventlog.CheckInvariants(e.allEvents(t, sid)); err != nil {
		t.Fatal(err)
	}
}

// snapshots returns the texts of the runtime-context snapshot messages among evs that carry the
// approval:policy entry.
func policySnapshots(t *testing.T, evs []eventlog.Event) []string {
	t.Helper()
	var out []string
	for _, ev := range evs {
		if ev.Type != eventlog.TypeUserMessage {
			continue
		}
		var um eventlog.UserMessage
		if err := json.Unmarshal(ev.Data, &um); err != nil {
			t.Fatal(err)
		}
		if um.Source.Form == "snapshot" && slices.Contains(um.Source.Sections, approval.PolicyContextName) {
			out = append(out, um.Text())
		}
	}
	return out
}

// TestAPR6_PromptStatesThePolicy: the model is told the approval policy in force as the
// runtime-context entry approval:policy: the preset's at first, the session's after it is set
// over HTTP (a new snapshot at the next step); a preset that cannot ask gets no such entry.
func TestAPR6_PromptStatesThePolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionOfPreset(t, e.keyA, `{"name":"never","model":{"provider":"scripted","model":"s"},
		"approval":{"policy":"never","ask":["echo"]}}`)
	evs := postStream(t, e.replica, sid, e.keyA, `{"content":"hello"}`).untilEnd(t)
	if got := policySnapshots(t, evs); len(got) != 1 || !strings.Contains(got[0], approval.PolicyText("never")) {
		t.Fatalf("snapshots %q, want one stating the preset's policy never", got)
	}
	e.do(t, "PUT", "/v1/sessions/"+sid+"/approval-policy", e.keyA, `{"policy":"ask"}`).want(t, http.StatusOK)
	evs = postStream(t, e.replica, sid, e.keyA, `{"content":"hello again"}`).untilEnd(t)
	if got := policySnapshots(t, evs); len(got) != 1 || !strings.Contains(got[0], approval.PolicyText("ask")) {
		t.Fatalf("snapshots %q, want one stating the session's policy ask", got)
	}

	plain := e.sessionOfPreset(t, e.keyA, minimalPreset)
	if got := policySnapshots(t, postStream(t, e.replica, plain, e.keyA, `{"content":"hello"}`).untilEnd(t)); len(got) != 0 {
		t.Fatalf("a preset that cannot ask got %q", got)
	}
}

// TestAPR6_SetNeverOverHTTPRejectsWithoutAnswerer: PUT approval-policy never appends
// approval/policy, and the next ask is rejected at once: no approval/asked, nobody answers, the
// call fails with APPROVAL_REJECTED. Setting ask again makes the next call ask. A policy other
// than ask or never is 400, another tenant's session 404.
func TestAPR6_SetNeverOverHTTPRejectsWithoutAnswerer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionOfPreset(t, e.keyA, askEchoPreset)
	path := "/v1/sessions/" + sid + "/approval-policy"
	e.do(t, "PUT", path, e.keyA, `{"policy":"allowed-always"}`).wantProblem(t, http.StatusBadRequest, "invalid_request")
	e.do(t, "PUT", path, e.keyA, `{}`).wantProblem(t, http.StatusBadRequest, "invalid_request")
	e.do(t, "PUT", path, e.keyB, `{"policy":"never"}`).wantProblem(t, http.StatusNotFound, "not_found")
	var set struct {
		Policy string
		Seq    int64
	}
	e.do(t, "PUT", path, e.keyA, `{"policy":"never"}`).want(t, http.StatusOK).json(t, &set)
	logged := e.allEvents(t, sid)
	if n := len(logged); set.Policy != "never" || n < 2 || logged[n-2].Seq != set.Seq ||
		logged[n-2].Type != eventlog.TypeApprovalPolicy || logged[n-1].Type != eventlog.TypeInboxSpliced {
		t.Fatalf("set %+v; log %+v, want approval/policy at its seq, then the notice's splice", set, logged)
	}
	// Setting it again appends nothing and answers the same event.
	var again struct {
		Policy string
		Seq    int64
	}
	e.do(t, "PUT", path, e.keyA, `{"policy":"never"}`).want(t, http.StatusOK).json(t, &again)
	if again != set || len(e.allEvents(t, sid)) != len(logged) {
		t.Fatalf("a repeated PUT answered %+v (first %+v) and the log went from %d to %d events",
			again, set, len(logged), len(e.allEvents(t, sid)))
	}

	evs := postStream(t, e.replica, sid, e.keyA, echoCall("ask-never")).untilEnd(t)
	for _, ev := range evs {
		if ev.Type == eventlog.TypeApprovalAsked {
			t.Fatalf("asked under policy never: %s", ev.Data)
		}
	}
	res := toolResults(t, evs)
	if len(res) != 1 || res[0].Error == nil || res[0].Error.Code != fault.CodeApprovalRejected {
		t.Fatalf("result %+v, want APPROVAL_REJECTED", res)
	}
	if text, _ := resultText(res[0]); text != `Error: the user rejected tool "echo"` {
		t.Fatalf("result text %q", text)
	}

	e.do(t, "PUT", path, e.keyA, `{"policy":"ask"}`).want(t, http.StatusOK)
	s := postStream(t, e.replica, sid, e.keyA, echoCall("ask-again"))
	a, _ := untilAsked(t, s)
	e.do(t, "POST", "/v1/sessions/"+sid+"/approvals/"+a.ID, e.keyA, map[string]string{"outcome": "allowed-once"}).want(t, http.StatusOK)
	if res := toolResults(t, s.untilEnd(t)); len(res) != 1 || res[0].Message.Content[0].IsError {
		t.Fatalf("result under ask again: %+v", res)
	}
	if err := eventlog.CheckInvariants(e.allEvents(t, sid)); err != nil {
		t.Fatal(err)
	}
}

// wireRequest is the part of a recorded chat-completions request the tests read.
type wireRequest struct {
	Messages []struct {
		Role       string `json:"role"`
		ToolCallID string `json:"tool_call_id"`
		Content    any    `json:"content"`
	} `json:"messages"`
}

// userTexts returns the texts of the user messages of a recorded request.
func userTexts(t *testing.T, body json.RawMessage) []string {
	t.Helper()
	var r wireRequest
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range r.Messages {
		if m.Role == "user" {
			out = append(out, fmt.Sprint(m.Content))
		}
	}
	return out
}

// TestAPR6_PolicyNoticeReachesTheModel: a policy set while a call waits for its approval takes
// effect in the same turn: the notice of the change and a runtime-context snapshot stating the
// new policy reach the model (cmd/mockllm's recorded request) at the next step, and that step's
// call of the same tool is rejected without an approval/asked.
func TestAPR6_PolicyNoticeReachesTheModel(t *testing.T) {
	t.Parallel()
	m := mockllm.New(mockllm.Config{})
	ms := httptest.NewServer(m.Handler())
	t.Cleanup(func() { m.Close(); ms.Close() })
	u, _ := url.Parse(ms.URL)
	e := newEnvHosts(t, u.Host)
	sid := e.sessionOfPreset(t, e.keyA, `{"name":"mock","model":{"provider":"openai","model":"mock","baseUrl":"`+ms.URL+`"},
		"approval":{"policy":"ask","ask":["echo"],"timeoutMs":60000}}`)
	s := postStream(t, e.replica, sid, e.keyA, `{"content":"steps:2 tool:echo args:{\"text\":\"x\"}"}`)
	a, _ := untilAsked(t, s)
	e.do(t, "PUT", "/v1/sessions/"+sid+"/approval-policy", e.keyA, `{"policy":"never"}`).want(t, http.StatusOK)
	e.do(t, "POST", "/v1/sessions/"+sid+"/approvals/"+a.ID, e.keyA, map[string]string{"outcome": "allowed-once"}).want(t, http.StatusOK)
	evs := s.untilEnd(t)
	for _, ev := range evs {
		if ev.Type == eventlog.TypeApprovalAsked {
			t.Fatalf("asked again after the policy became never: %s", ev.Data)
		}
	}
	res := toolResults(t, evs)
	if len(res) != 2 || res[0].Message.Content[0].IsError || res[1].Error == nil || res[1].Error.Code != fault.CodeApprovalRejected {
		t.Fatalf("results %+v, want the approved call's output, then a rejection", res)
	}

	reqs := m.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model requests, want 3", len(reqs))
	}
	has := func(texts []string, want string) bool {
		return slices.ContainsFunc(texts, func(s string) bool { return strings.Contains(s, want) })
	}
	first, second := userTexts(t, reqs[0]), userTexts(t, reqs[1])
	if !has(first, approval.PolicyText("ask")) || has(first, approval.NoticeText("never")) {
		t.Fatalf("first request's user messages %q, want the policy ask and no notice", first)
	}
	if !has(second, approval.NoticeText("never")) || !has(second, approval.PolicyText("never")) {
		t.Fatalf("second request's user messages %q, want the notice and the policy never", second)
	}
	if err := eventlog.CheckInvariants(e.allEvents(t, sid)); err != nil {
		t.Fatal(err)
	}
}
