package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

type eventPage struct {
	Events    []map[string]json.RawMessage
	NextAfter int64
}

func TestEventPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionCreate(t, e.keyA)
	path := "/v1/sessions/" + sid.String() + "/events"
	var page eventPage
	e.do(t, "GET", path, e.keyA, nil).want(t, http.StatusOK).json(t, &page)
	if len(page.Events) != 0 || page.NextAfter != -1 {
		t.Fatalf("empty log: %+v", page)
	}
	e.appendEvents(sid, turnStart(1),
		eventlog.NewEvent{Type: "user/message", Data: llm.NewUserMessage("u1", "hi"), SurfaceOp: eventlog.Append},
		stepStart(1, 1), chunk(1, 1, "a"), chunk(1, 1, "b"), stepEnd(1, 1), turnEnd(1))

	e.do(t, "GET", path+"?limit=3", e.keyA, nil).want(t, http.StatusOK).json(t, &page)
	if len(page.Events) != 3 || page.NextAfter != 2 {
		t.Fatalf("first page: %d events, nextAfter %d", len(page.Events), page.NextAfter)
	}
	// The SES-1 shape: {type, seq, time, data}, plus surfaceOp on surface events.
	for i, ev := range page.Events {
		var seq int64
		_ = json.Unmarshal(ev["seq"], &seq)
		_, hasOp := ev["surfaceOp"]
		wantKeys := 4
		if i == 1 {
			wantKeys = 5
		}
		if seq != int64(i) || len(ev) != wantKeys || ev["type"] == nil || ev["time"] == nil || ev["data"] == nil || hasOp != (i == 1) {
			t.Fatalf("event %d: %v", i, ev)
		}
	}
	if string(page.Events[1]["surfaceOp"]) != `"append"` {
		t.Fatalf("surfaceOp = %s", page.Events[1]["surfaceOp"])
	}
	e.do(t, "GET", path+"?after=2", e.keyA, nil).want(t, http.StatusOK).json(t, &page)
	if len(page.Events) != 4 || page.NextAfter != 6 {
		t.Fatalf("rest: %d events, nextAfter %d", len(page.Events), page.NextAfter)
	}
	e.do(t, "GET", path+"?after=6", e.keyA, nil).want(t, http.StatusOK).json(t, &page)
	if len(page.Events) != 0 || page.NextAfter != 6 {
		t.Fatalf("past the end: %d events, nextAfter %d", len(page.Events), page.NextAfter)
	}
	e.do(t, "GET", path+"?types=assistant/chunk,turn/end", e.keyA, nil).want(t, http.StatusOK).json(t, &page)
	var types []string
	for _, ev := range page.Events {
		var typ string
		_ = json.Unmarshal(ev["type"], &typ)
		types = append(types, typ)
	}
	if len(types) != 3 || types[0] != "assistant/chunk" || types[2] != "turn/end" || page.NextAfter != 6 {
		t.Fatalf("filtered: %v, nextAfter %d", types, page.NextAfter)
	}
}
