package api_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
)

// TestFailedTurnIsOneOutcome: every way a turn ends gets the same verdict from the turn resource
// and from the webhook its turn/end causes. Issue 18 found them disagreeing: the webhooks reported
// a turn interrupted by crash repair as turn.failed, while the turn resource (and the dashboard,
// which folded the same events again) knew only error as failed. The outcome rule is now
// eventlog.TurnOutcome and its Failed, and the resource shows it as `failed`.
func TestFailedTurnIsOneOutcome(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do(t, "POST", "/v1/webhooks", e.keyA, map[string]any{"url": "https://hooks.example.com/a",
		"events": []string{"turn.failed", "turn.completed"}}).want(t, http.StatusCreated)
	id := e.sessionCreate(t, e.keyA)
	sid := id.String()
	cases := []struct {
		reason map[string]any
		status string
		failed bool
	}{
		{map[string]any{"kind": "completed"}, "completed", false},
		{map[string]any{"kind": "error", "error": map[string]any{"message": "boom", "code": "SERVER", "status": 500}}, "failed", true},
		{map[string]any{"kind": "interrupted"}, "interrupted", true},
		{map[string]any{"kind": "aborted", "reason": map[string]string{"kind": "user"}}, "cancelled", false},
		{map[string]any{"kind": "aborted", "reason": map[string]string{"kind": "disposed", "reason": "lease lost"}}, "aborted", false},
		{map[string]any{"kind": "max-tokens"}, "max-tokens", false},
		{map[string]any{"kind": "blocked"}, "blocked", false},
	}
	for i, c := range cases {
		e.appendEvents(id, turnStart(i+1), eventlog.NewEvent{Type: "turn/end", Data: map[string]any{"turn": i + 1, "reason": c.reason}})
	}
	var list struct {
		Items []struct {
			Turn    int
			Status  string
			Failed  bool
			LastSeq int64
		}
	}
	e.do(t, "GET", "/v1/sessions/"+sid+"/turns", e.keyA, nil).want(t, 200).json(t, &list)
	if len(list.Items) != len(cases) {
		t.Fatalf("%d turns listed, want %d", len(list.Items), len(cases))
	}
	for i, c := range cases {
		tr := list.Items[i]
		var hook string
		eventID := sid + ":" + strconv.FormatInt(tr.LastSeq, 10) + ":"
		if err := e.pool.QueryRow(context.Background(),
			`SELECT event_type FROM webhook_deliveries WHERE starts_with(event_id, $1)`, eventID).Scan(&hook); err != nil {
			t.Fatalf("turn %d: the webhook of its turn/end: %v", tr.Turn, err)
		}
		if tr.Status != c.status || tr.Failed != c.failed || (hook == "turn.failed") != tr.Failed {
			t.Errorf("turn %d ended %v: status %s failed %v, webhook %s; want status %s failed %v",
				tr.Turn, c.reason, tr.Status, tr.Failed, hook, c.status, c.failed)
		}
	}
}
