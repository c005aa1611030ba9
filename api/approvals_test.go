package api_test

import (
	"net/http"
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
