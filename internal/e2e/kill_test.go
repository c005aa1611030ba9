package e2e

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
)

// TestKill9ReplicaRecovers: the replica running a turn is killed with SIGKILL while the turn
// waits on a slow model call or a long tool call. Another replica repairs the turn (SES-14:
// `turn/end` with reason interrupted, a TOOL_OUTCOME_UNKNOWN result for the started call) and
// serves the next message, within 30 s of the kill.
func TestKill9ReplicaRecovers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		content string // the first message: a turn that is still running when the replica dies
		running string // the event that shows the turn is under way
		results []string
	}{
		{name: "slow model", content: "latency:20000", running: eventlog.TypeUserMessage},
		{name: "tool call", content: `tool:sleep args:{"ms":60000,"text":"z"}`, running: eventlog.TypeToolCall,
			results: []string{fault.CodeToolOutcomeUnknown}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Only replica A runs at first, so the turn is A's; B starts once it is under way.
			c := newCluster(t, 1, 3*time.Second)
			a, sid := c.replicas[0], c.sessionCreate(t)
			first, err := a.postMessage(t.Context(), c.key, sid, tc.content, "followup")
			if err != nil {
				t.Fatal(err)
			}
			a.waitEvents(t, c.key, sid, 30*time.Second, func(evs []storedEvent) bool { return count(evs, tc.running) > 0 })
			b := c.startReplica()
			a.kill9(t)
			killed := time.Now()

			next, err := b.postMessage(t.Context(), c.key, sid, "text", "followup")
			if err != nil {
				t.Fatal(err)
			}
			evs := b.waitEvents(t, c.key, sid, 30*time.Second, func(evs []storedEvent) bool {
				turn := servingTurn(evs, next.MessageID)
				return turn != 0 && slices.ContainsFunc(turnEnds(evs), func(te turnEnd) bool { return te.turn == turn })
			})
			t.Logf("repaired and served the next message %v after the kill", time.Since(killed).Round(time.Millisecond))

			ends := turnEnds(evs)
			if len(ends) != 2 || ends[0].turn != 1 || ends[0].kind != "interrupted" || ends[1].kind != "completed" {
				t.Errorf("turn ends %+v, want turn 1 interrupted, then one completed\n%s", ends, describe(evs))
			}
			if got := toolResultCodes(evs); !slices.Equal(got, tc.results) {
				t.Errorf("tool result error codes %v, want %v\n%s", got, tc.results, describe(evs))
			}
			if ids := servedIDs(evs); ids[first.MessageID] != 1 || ids[next.MessageID] != 1 || len(ids) != 2 {
				t.Errorf("messages served %v, want %s and %s once each", ids, first.MessageID, next.MessageID)
			}
			if err := checkLog(evs); err != nil {
				t.Errorf("%v\n%s", err, describe(evs))
			}
		})
	}
}

// toolResultCodes returns the error codes of the log's tool results ("" for a success).
func toolResultCodes(evs []storedEvent) []string {
	var out []string
	for _, ev := range evs {
		if ev.Type != eventlog.TypeToolResult {
			continue
		}
		var d struct {
			Error *struct{ Code string }
		}
		_ = json.Unmarshal(ev.Data, &d)
		code := ""
		if d.Error != nil {
			code = d.Error.Code
		}
		out = append(out, code)
	}
	return out
}
