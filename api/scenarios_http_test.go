package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/approval"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/pgstore"
)

// scenarioPreset has a pre-execute deny, a pre-execute ask, a guard and a post-execute block on
// echo calls whose text matches, and allows every other call.
const scenarioPreset = `{"name":"scenarios","model":{"provider":"scripted","model":"m"},
	"approval":{"policy":"ask","timeoutMs":60000},
	"policies":{
		"preExecute":[{"tools":["echo"],"match":{"text":"^rm "},"decision":"deny","reason":"rm is not allowed"},
			{"tools":["echo"],"match":{"text":"^ask"},"decision":"ask","reason":"a person must look"},
			{"tools":["*"],"decision":"allow"}],
		"guards":[{"tools":["echo"],"match":{"text":"^sudo"},"reason":"no sudo for agents"}],
		"postExecute":[{"tools":["echo"],"match":{"text":"secret"},"action":"block","feedback":"the output is withheld"}]}}`

// echoCall is the scripted model's directive to call echo once with text.
func echoCall(text string) string {
	args, _ := json.Marshal(map[string]string{"text": text})
	body, _ := json.Marshal(map[string]string{"content": "tool:echo args:" + url.PathEscape(string(args))})
	return string(body)
}

// streamedResult reads the turn's stream to its end and returns the one tool/result and the
// turn/end.
func streamedResult(t *testing.T, evs []eventlog.Event) (eventlog.ToolResult, eventlog.Event) {
	t.Helper()
	var res []eventlog.ToolResult
	for _, ev := range evs {
		if ev.Type == eventlog.TypeToolResult {
			var tr eventlog.ToolResult
			if err := json.Unmarshal(ev.Data, &tr); err != nil {
				t.Fatal(err)
			}
			res = append(res, tr)
		}
	}
	if len(res) != 1 {
		t.Fatalf("%d tool results, want 1", len(res))
	}
	return res[0], evs[len(evs)-1]
}

func resultText(tr eventlog.ToolResult) (string, bool) {
	b := tr.Message.Content[0]
	return b.Content[0].Text, b.IsError
}

// TestScenarios06To11OverHTTP runs the policy and approval scenarios through the HTTP API with
// a preset's declarative policies and the server's approval service: a pre-execute deny (06),
// an ask on a replica without an approval service (07), an ask answered allowed-once and
// rejected (08), an approver that fails (09), a cancel while the approval is pending (10), a
// guard that denies although pre-execute allowed (11), and a post-execute block (12).
func TestScenarios06To11OverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionOfPreset(t, e.keyA, scenarioPreset)
	run := func(text string) (eventlog.ToolResult, eventlog.Event) {
		t.Helper()
		return streamedResult(t, postStream(t, e.replica, sid, e.keyA, echoCall(text)).untilEnd(t))
	}
	for _, c := range []struct {
		scenario, text, want string
		isError              bool
		code                 string
	}{
		{"06 pre-execute deny", "rm -rf /", "Error: rm is not allowed", true, fault.CodeToolDenied},
		{"11 guard after allow", "sudo reboot", "Error: no sudo for agents", true, fault.CodeToolDenied},
		{"12 post-execute block", "a secret value", "the output is withheld", true, ""},
		{"allowed", "hello", "hello", false, ""},
	} {
		tr, end := run(c.text)
		text, isErr := resultText(tr)
		if text != c.want || isErr != c.isError {
			t.Errorf("%s: result %q isError %v, want %q %v", c.scenario, text, isErr, c.want, c.isError)
		}
		if c.code != "" && (tr.Error == nil || tr.Error.Code != c.code) {
			t.Errorf("%s: error %+v, want code %s", c.scenario, tr.Error, c.code)
		}
		if !strings.Contains(string(end.Data), "completed") {
			t.Errorf("%s: turn ended %s", c.scenario, end.Data)
		}
	}

	// 08: an ask, answered allowed-once and then rejected on the next turn; 10: cancelled while
	// pending.
	askAndAnswer := func(text string, answer func(id string)) (eventlog.ToolResult, eventlog.Event) {
		t.Helper()
		s := postStream(t, e.replica, sid, e.keyA, echoCall(text))
		var evs []eventlog.Event
		for {
			var ev eventlog.Event
			if err := json.Unmarshal([]byte(s.next(t).data), &ev); err != nil {
				t.Fatal(err)
			}
			evs = append(evs, ev)
			if ev.Type == eventlog.TypeApprovalAsked {
				var a eventlog.ApprovalAsked
				_ = json.Unmarshal(ev.Data, &a)
				answer(a.ID)
				break
			}
			if ev.Type == eventlog.TypeToolResult {
				t.Fatalf("%q: tool/result before approval/asked", text)
			}
		}
		return streamedResult(t, append(evs, s.untilEnd(t)...))
	}
	decide := func(outcome string) func(string) {
		return func(id string) {
			e.do(t, "POST", "/v1/sessions/"+sid+"/approvals/"+id, e.keyA, map[string]string{"outcome": outcome}).want(t, http.StatusOK)
		}
	}
	if tr, _ := askAndAnswer("ask-yes", decide("allowed-once")); func() bool { s, b := resultText(tr); return s != "ask-yes" || b }() {
		t.Errorf("08 allowed-once: %+v", tr)
	}
	tr, _ := askAndAnswer("ask-no", decide("rejected"))
	if s, isErr := resultText(tr); s != `Error: the user rejected tool "echo"` || !isErr || tr.Error == nil || tr.Error.Code != fault.CodeApprovalRejected {
		t.Errorf("08 rejected: %q %v %+v", s, isErr, tr.Error)
	}
	tr, end := askAndAnswer("ask-cancel", func(string) {
		e.do(t, "POST", "/v1/sessions/"+sid+"/cancel", e.keyA, map[string]string{}).want(t, http.StatusOK)
	})
	if tr.Error == nil || tr.Error.Code != fault.CodeAbortedBeforeDispatch {
		t.Errorf("10 cancel while pending: %+v", tr.Error)
	}
	if !strings.Contains(string(end.Data), "aborted") {
		t.Errorf("10: turn ended %s, want aborted", end.Data)
	}
	var list struct{ Items []struct{ ID string } }
	e.do(t, "GET", "/v1/sessions/"+sid+"/approvals", e.keyA, nil).want(t, http.StatusOK).json(t, &list)
	if len(list.Items) != 0 {
		t.Errorf("approvals left pending: %+v", list.Items)
	}
	if err := eventlog.CheckInvariants(e.allEvents(t, sid)); err != nil {
		t.Fatal(err)
	}

	// 09 first: 07 starts a replica without an approval service, and a parked turn resumes on
	// any replica of the server (E6).
	scenario09OverHTTP(t, e)
	scenario07OverHTTP(t, e)
}

// scenario07OverHTTP: on a replica whose server runs without an approval service, an ask is
// denied at once with the ask's reason, or `tool "<n>" requires approval (not yet supported)`
// when it has none ({ToolDeniedError, TOOL_DENIED}); nothing is asked, the body never runs, and
// the turn completes.
func scenario07OverHTTP(t *testing.T, e *env) {
	t.Helper()
	e.approvals = func(approval.Config) *approval.Service { return nil }
	bare := e.newReplica()
	e.approvals = nil
	for _, c := range []struct{ preset, text, want string }{
		{scenarioPreset, "ask-07", "Error: a person must look"},
		{`{"name":"ask-07","model":{"provider":"scripted","model":"m"},"approval":{"ask":["echo"]}}`, "plain-07",
			`Error: tool "echo" requires approval (not yet supported)`},
	} {
		sid := e.sessionOfPreset(t, e.keyA, c.preset)
		evs := postStream(t, bare, sid, e.keyA, echoCall(c.text)).untilEnd(t)
		tr, end := streamedResult(t, evs)
		text, isErr := resultText(tr)
		if text != c.want || !isErr || tr.Error == nil || tr.Error.Code != fault.CodeToolDenied {
			t.Errorf("07 %s: result %q isError %v error %+v, want %q TOOL_DENIED", c.text, text, isErr, tr.Error, c.want)
		}
		if !strings.Contains(string(end.Data), "completed") {
			t.Errorf("07 %s: turn ended %s", c.text, end.Data)
		}
		for _, ev := range e.allEvents(t, sid) {
			if ev.Type == eventlog.TypeApprovalAsked {
				t.Errorf("07 %s: asked without an approval service: %s", c.text, ev.Data)
			}
		}
	}
}

// scenario09OverHTTP: the approver fails: the pending approval is decided with an outcome the
// approval service cannot act on (written by another writer: the API refuses it), and the call
// ends with a final failure carrying the approver's error: the body never runs and post-execute
// is skipped (the preset's block of "secret" calls does not replace the failure), and the turn
// completes.
func scenario09OverHTTP(t *testing.T, e *env) {
	t.Helper()
	sid := e.sessionOfPreset(t, e.keyA, scenarioPreset)
	s := postStream(t, e.replica, sid, e.keyA, echoCall("ask secret"))
	var evs []eventlog.Event
	var asked eventlog.ApprovalAsked
	for asked.ID == "" {
		var ev eventlog.Event
		if err := json.Unmarshal([]byte(s.next(t).data), &ev); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
		if ev.Type == eventlog.TypeApprovalAsked {
			_ = json.Unmarshal(ev.Data, &asked)
		}
		if ev.Type == eventlog.TypeTurnEnd {
			t.Fatalf("09: the turn ended before the ask: %s", ev.Data)
		}
	}
	path := "/v1/sessions/" + sid + "/approvals/" + asked.ID
	e.do(t, "POST", path, e.keyA, map[string]string{"outcome": "allowed-always"}).wantProblem(t, http.StatusBadRequest, "invalid_request")
	// Another writer appends the decision with the session's wake, as every answer is appended
	// (the ask parked the turn, E6: nothing else would resume it before the ask's timeout).
	q, err := pgstore.NewQueue(e.log, pgstore.QueueConfig{InsertOnly: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.log.Post(context.Background(), pgstore.PostParams{Tenant: e.tenantA, Session: uuid.MustParse(sid), Queue: q,
		Build: eventlog.Batch(eventlog.Of(eventlog.ApprovalDecided{ID: asked.ID, Outcome: "allowed-always"}))}); err != nil {
		t.Fatal(err)
	}
	tr, end := streamedResult(t, append(evs, s.untilEnd(t)...))
	text, isErr := resultText(tr)
	if !isErr || !strings.HasPrefix(text, "Error: approval: ") || !strings.Contains(text, `"allowed-always"`) {
		t.Errorf("09: result %q isError %v, want the approver's failure", text, isErr)
	}
	if strings.Contains(text, "ask secret") || text == "the output is withheld" {
		t.Errorf("09: result %q: the body ran or post-execute replaced the failure", text)
	}
	if !strings.Contains(string(end.Data), "completed") {
		t.Errorf("09: turn ended %s", end.Data)
	}
	e.do(t, "POST", path, e.keyA, map[string]string{"outcome": "allowed-once"}).wantProblem(t, http.StatusConflict, "conflict")
	if err := eventlog.CheckInvariants(e.allEvents(t, sid)); err != nil {
		t.Fatal(err)
	}
}
