package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
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
// stream shows approval/asked with the call's arguments while the call waits; a client that was
// not following lists the pending approval on another replica and answers it there; the tool runs
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
	if asked.ToolName != "echo" || string(asked.Arguments) != `{"text":"approved"}` {
		t.Fatalf("asked %+v", asked)
	}
	path := "/v1/sessions/" + sid + "/approvals"
	var list struct{ Items []struct{ ID string } }
	other.do(t, "GET", path, e.keyA, nil).want(t, http.StatusOK).json(t, &list)
	if len(list.Items) != 1 || list.Items[0].ID != asked.ID {
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
