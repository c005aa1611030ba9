package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
)

// TestKill9DuringRunCode: the replica running a `code` preset's turn is killed with SIGKILL
// while the turn's run_code program waits on its second sub-call (an exclusive `sleep`), after
// its first sub-call (`echo`) settled. Another replica repairs the turn like any other (SES-14):
// the outer run_code call, logged as started, gets a TOOL_OUTCOME_UNKNOWN result, the turn ends
// interrupted, no settlement is invented for the interrupted sub-call, the log passes the
// invariants, and the session serves the next message, itself a run_code program. The repair is
// done either by the lease sweeper with no new message, or by the replica the next message
// reaches.
func TestKill9DuringRunCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		sweep bool // wait for the sweeper's repair before posting the next message
	}{
		{name: "sweeper repairs", sweep: true},
		{name: "next message repairs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Only replica A runs at first, so the turn is A's; B starts once the program waits.
			c := newCluster(t, 1, 3*time.Second)
			a := c.replicas[0]
			sid := c.modeSession(t, "code")
			first, err := a.postMessage(t.Context(), c.key, sid, runCodeScript(`const fast = await tools.echo({text: "before the crash"});
const slow = await tools.sleep({ms: 60000, text: "never"});
return fast + slow;`), "followup")
			if err != nil {
				t.Fatal(err)
			}
			var outer string
			a.waitEvents(t, c.key, sid, 30*time.Second, func(evs []storedEvent) bool {
				for _, ev := range evs {
					var d eventlog.CodeDispatchStart
					if ev.Type == eventlog.TypeToolCodeDispatchInit && json.Unmarshal(ev.Data, &d) == nil && d.Name == "sleep" {
						outer = d.RootCallID
						return true
					}
				}
				return false
			})
			b := c.startReplica()
			a.kill9(t)
			killed := time.Now()

			if tc.sweep {
				evs := b.waitEvents(t, c.key, sid, 60*time.Second, func(evs []storedEvent) bool { return len(turnEnds(evs)) == 1 })
				t.Logf("the sweeper repaired the turn %v after the kill", time.Since(killed).Round(time.Millisecond))
				if err := checkLog(evs); err != nil {
					t.Fatalf("the repaired log: %v\n%s", err, describe(evs))
				}
			}
			next, err := b.postMessage(t.Context(), c.key, sid, runCodeScript(`return await tools.echo({text: "after the crash"});`), "followup")
			if err != nil {
				t.Fatal(err)
			}
			evs := b.waitEvents(t, c.key, sid, 60*time.Second, func(evs []storedEvent) bool {
				turn := servingTurn(evs, next.MessageID)
				return turn != 0 && slices.ContainsFunc(turnEnds(evs), func(te turnEnd) bool { return te.turn == turn })
			})
			t.Logf("repaired and served the next message %v after the kill", time.Since(killed).Round(time.Millisecond))

			if err := checkLog(evs); err != nil {
				t.Fatalf("%v\n%s", err, describe(evs))
			}
			ends := turnEnds(evs)
			if len(ends) != 2 || ends[0].turn != 1 || ends[0].kind != "interrupted" || ends[1].kind != "completed" {
				t.Fatalf("turn ends %+v, want turn 1 interrupted, then one completed\n%s", ends, describe(evs))
			}
			turn1, turn2 := evs[:ends[0].seq+1], evs[ends[0].seq+1:]
			if got := toolResultCodes(turn1); !slices.Equal(got, []string{fault.CodeToolOutcomeUnknown}) {
				t.Errorf("turn 1 tool result codes %v, want the run_code call's %s\n%s", got, fault.CodeToolOutcomeUnknown, describe(turn1))
			}
			if got := resultCallIDs(turn1); !slices.Equal(got, []string{outer}) {
				t.Errorf("turn 1 results answer %v, want the outer run_code call %s", got, outer)
			}
			// The echo sub-call settled before the crash; the sleep sub-call only started.
			if s, d := count(turn1, eventlog.TypeToolCodeDispatchInit), count(turn1, eventlog.TypeToolCodeDispatch); s != 2 || d != 1 {
				t.Errorf("turn 1 has %d code-dispatch-start and %d code-dispatch events, want 2 and 1\n%s", s, d, describe(turn1))
			}
			if err := dispatchOrder(turn2, 1); err != nil {
				t.Errorf("the next turn's program: %v\n%s", err, describe(turn2))
			}
			if got := toolResultCodes(turn2); !slices.Equal(got, []string{""}) {
				t.Errorf("turn 2 tool result codes %v, want one success", got)
			}
			if ids := servedIDs(evs); ids[first.MessageID] != 1 || ids[next.MessageID] != 1 || len(ids) != 2 {
				t.Errorf("messages served %v, want %s and %s once each", ids, first.MessageID, next.MessageID)
			}
			hist := historyToolResults(t, b, c.key, sid)
			if len(hist) != 2 || !strings.Contains(hist[0], eventlog.OutcomeUnknownText) || hist[1] != "after the crash" {
				t.Errorf("history tool results %q, want the repair's outcome-unknown text, then the next program's result", hist)
			}
		})
	}
}

// resultCallIDs returns the call ids the log's tool results answer.
func resultCallIDs(evs []storedEvent) []string {
	var out []string
	for _, ev := range evs {
		if ev.Type != eventlog.TypeToolResult {
			continue
		}
		var d struct {
			Message struct {
				Source struct {
					CallID string `json:"callId"`
				} `json:"source"`
			} `json:"message"`
		}
		_ = json.Unmarshal(ev.Data, &d)
		out = append(out, d.Message.Source.CallID)
	}
	return out
}
