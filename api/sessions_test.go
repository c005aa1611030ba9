package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

func TestSessionLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pid := e.presetCreate(t, e.keyA, minimalPreset)
	var created struct {
		ID            uuid.UUID
		PresetID      uuid.UUID
		PresetVersion int
		CreatedAt     string
	}
	e.do(t, "POST", "/v1/sessions", e.keyA, map[string]any{"presetId": pid}).want(t, http.StatusCreated).json(t, &created)
	if created.ID == uuid.Nil || created.PresetID != pid || created.PresetVersion != 1 || created.CreatedAt == "" {
		t.Fatalf("created %+v", created)
	}
	path := "/v1/sessions/" + created.ID.String()
	var got sessionOut
	e.do(t, "GET", path, e.keyA, nil).want(t, http.StatusOK).json(t, &got)
	if got.ID != created.ID || got.LastSeq != -1 {
		t.Fatalf("got %+v", got)
	}
	second := e.sessionCreate(t, e.keyA)
	var list struct {
		Items      []sessionOut
		NextCursor string
	}
	e.do(t, "GET", "/v1/sessions?limit=1", e.keyA, nil).want(t, http.StatusOK).json(t, &list)
	if len(list.Items) != 1 || list.Items[0].ID != second || list.NextCursor == "" {
		t.Fatalf("first page %+v; want the newest session and a cursor", list)
	}
	e.do(t, "GET", "/v1/sessions?limit=1&cursor="+list.NextCursor, e.keyA, nil).want(t, http.StatusOK).json(t, &list)
	if len(list.Items) != 1 || list.Items[0].ID != created.ID || list.NextCursor != "" {
		t.Fatalf("second page %+v", list)
	}
	e.do(t, "DELETE", path, e.keyA, nil).want(t, http.StatusNoContent)
	e.do(t, "GET", path, e.keyA, nil).wantProblem(t, http.StatusNotFound, "not_found")
	e.do(t, "GET", path+"/events", e.keyA, nil).wantProblem(t, http.StatusNotFound, "not_found")
	e.do(t, "DELETE", path, e.keyA, nil).wantProblem(t, http.StatusNotFound, "not_found")
}

func TestSessionHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionCreate(t, e.keyA)
	var empty struct{ Messages []llm.Message }
	r := e.do(t, "GET", "/v1/sessions/"+sid.String()+"/history", e.keyA, nil).want(t, http.StatusOK)
	if string(r.body) != "{\"messages\":[]}\n" {
		t.Fatalf("empty history = %s", r.body)
	}
	r.json(t, &empty)
	e.appendEvents(sid, turnStart(1),
		eventlog.NewEvent{Type: "user/message", Data: llm.NewUserMessage("u1", "hello"), SurfaceOp: eventlog.Append},
		stepStart(1, 1), chunk(1, 1, "hi"), stepEnd(1, 1), turnEnd(1))
	var h struct{ Messages []llm.Message }
	e.do(t, "GET", "/v1/sessions/"+sid.String()+"/history", e.keyA, nil).want(t, http.StatusOK).json(t, &h)
	if len(h.Messages) != 1 || h.Messages[0].ID != "u1" || h.Messages[0].Role != "user" {
		t.Fatalf("history %+v; want the one user message", h.Messages)
	}
}

// TestSessionForkOverHTTP covers SES-15 through POST /v1/sessions {fork}.
func TestSessionForkOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src := e.sessionCreate(t, e.keyA)
	// seq 0..4: a closed turn, then seq 5..6: an open one.
	e.appendEvents(src, turnStart(1), stepStart(1, 1), chunk(1, 1, "a"), stepEnd(1, 1), turnEnd(1))
	e.appendEvents(src, turnStart(2), stepStart(2, 1))
	fork := func(boundary any) response {
		f := map[string]any{"sessionId": src}
		if boundary != nil {
			f["boundarySeq"] = boundary
		}
		return e.do(t, "POST", "/v1/sessions", e.keyA, map[string]any{"fork": f})
	}
	var child sessionOut
	fork(4).want(t, http.StatusCreated).json(t, &child)
	var srcOut sessionOut
	e.do(t, "GET", "/v1/sessions/"+src.String(), e.keyA, nil).want(t, http.StatusOK).json(t, &srcOut)
	if child.ParentSession != src.String() || child.SeedLength == nil || *child.SeedLength != 5 ||
		*child.PresetID != *srcOut.PresetID || *child.PresetVersion != *srcOut.PresetVersion {
		t.Fatalf("child %+v; want parentSession %s, seedLength 5 and the source's preset", child, src)
	}
	var page struct {
		Events    []json.RawMessage
		NextAfter int64
	}
	e.do(t, "GET", "/v1/sessions/"+child.ID.String()+"/events?types=session/end-seed", e.keyA, nil).
		want(t, http.StatusOK).json(t, &page)
	if len(page.Events) != 1 || page.NextAfter != 5 {
		t.Fatalf("child log: %d end-seed events, nextAfter %d; want one at seq 5", len(page.Events), page.NextAfter)
	}
	fork(6).wantProblem(t, http.StatusConflict, "open_turn")
	fork(99).wantProblem(t, http.StatusBadRequest, "invalid_boundary")
	fork(-3).wantProblem(t, http.StatusBadRequest, "invalid_boundary")
	e.do(t, "POST", "/v1/sessions", e.keyA, map[string]any{"fork": map[string]any{"sessionId": uuid.New()}}).
		wantProblem(t, http.StatusNotFound, "not_found")
	e.do(t, "POST", "/v1/sessions", e.keyA, map[string]any{"presetId": uuid.New(), "fork": map[string]any{"sessionId": src}}).
		wantProblem(t, http.StatusBadRequest, "invalid_request")
	e.do(t, "DELETE", "/v1/sessions/"+src.String(), e.keyA, nil).want(t, http.StatusNoContent)
	fork(nil).wantProblem(t, http.StatusConflict, "session_not_live")
}
