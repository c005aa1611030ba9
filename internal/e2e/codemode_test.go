package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
)

// TestCodeModeOverHTTP: on real server processes, a `code` preset whose model (cmd/mockllm) sends
// one run_code program calling two parallel-safe tools with Promise.all: the log shows the
// code-dispatch events before the outer tool/result, both sub-calls start before either settles
// (they overlap), the history has a single run_code result, and the prompt lists only run_code
// and shows the SDK; the SSE stream delivers the same events in the same order. A `both` preset
// offers run_code beside the native tools, runs a run_code program that calls two tools the same
// way, and then a native tool call in the same session.
func TestCodeModeOverHTTP(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, 10*time.Second)
	r := c.replicas[0]
	ctx := t.Context()

	t.Run("code", func(t *testing.T) {
		sid := c.modeSession(t, "code")
		if got, system := promptOf(t, r, c.key, sid); !slices.Equal(got, []string{"run_code"}) ||
			!strings.Contains(system, "declare const tools") || !strings.Contains(system, "wait") {
			t.Fatalf("code prompt: tools %v, system %q", got, system)
		}
		// Two parallel-safe `wait` calls: if the sub-scheduler ran them one after the other, the
		// first would settle before the second started.
		evs := runProgram(t, c, sid, 1, `const [a, b] = await Promise.all([tools.wait({ms: 2000, text: "one"}), tools.wait({ms: 2000, text: "two"})]);
console.log("saw " + a);
return b;`)
		if err := overlapped(evs); err != nil {
			t.Fatalf("%v\n%s", err, describe(evs))
		}
		if got := historyToolResults(t, r, c.key, sid); !slices.Equal(got, []string{"saw one\ntwo"}) {
			t.Fatalf("history tool results %q, want the single run_code result", got)
		}
	})

	t.Run("both", func(t *testing.T) {
		sid := c.modeSession(t, "both")
		if got, system := promptOf(t, r, c.key, sid); !slices.Contains(got, "run_code") || !slices.Contains(got, "echo") ||
			!slices.Contains(got, "wait") || !strings.Contains(system, "declare const tools") {
			t.Fatalf("both prompt: tools %v, system %q; want run_code beside the native tools, and the SDK", got, system)
		}
		// Turn 1: one run_code program that calls two different tools.
		runProgram(t, c, sid, 1, `const a = await tools.echo({text: "first"});
const b = await tools.wait({ms: 50, text: "second"});
return a + " " + b;`)

		// Turn 2, the same session: a native call of echo, outside any program.
		if _, err := r.postMessage(ctx, c.key, sid, `tool:echo args:{"text":"native"}`, "followup"); err != nil {
			t.Fatal(err)
		}
		evs := r.waitEvents(t, c.key, sid, 60*time.Second, func(evs []storedEvent) bool { return len(turnEnds(evs)) == 2 })
		if err := checkLog(evs); err != nil {
			t.Fatalf("%v\n%s", err, describe(evs))
		}
		if ends := turnEnds(evs); ends[1].kind != "completed" {
			t.Fatalf("turn ends %+v, want turn 2 completed\n%s", ends, describe(evs))
		}
		turn2 := evs[turnEnds(evs)[0].seq+1:]
		var calls []string
		for _, ev := range turn2 {
			switch ev.Type {
			case eventlog.TypeToolCall:
				var d struct{ Name string }
				_ = json.Unmarshal(ev.Data, &d)
				calls = append(calls, d.Name)
			case eventlog.TypeToolCodeDispatchInit, eventlog.TypeToolCodeDispatch:
				t.Fatalf("the native call logged %s\n%s", ev.Type, describe(turn2))
			}
		}
		if !slices.Equal(calls, []string{"echo"}) || !slices.Equal(toolResultCodes(turn2), []string{""}) {
			t.Fatalf("turn 2 calls %v with result codes %v, want one successful native echo\n%s", calls, toolResultCodes(turn2), describe(turn2))
		}
		if got := historyToolResults(t, r, c.key, sid); !slices.Equal(got, []string{"first second", "native"}) {
			t.Fatalf("history tool results %q, want the run_code result, then the native echo's", got)
		}
	})
}

// modeSession creates a preset of the given tool mode on the mock model and a session of it.
func (c *cluster) modeSession(t *testing.T, mode string) string {
	t.Helper()
	r := c.replicas[0]
	var p struct{ ID string }
	mustJSON(t, r.call(t.Context(), "POST", "/v1/presets", c.key, map[string]any{
		"name": mode, "tools": map[string]any{"mode": mode},
		"model": map[string]string{"provider": "openai", "model": "mock", "baseUrl": c.mockURL}}), 201, &p)
	var s struct{ ID string }
	mustJSON(t, r.call(t.Context(), "POST", "/v1/sessions", c.key, map[string]string{"presetId": p.ID}), 201, &s)
	return s.ID
}

// promptOf returns the names of the tools the session's model sees, and its system prompt.
func promptOf(t *testing.T, r *replica, key, sid string) ([]string, string) {
	t.Helper()
	var prompt struct {
		System string
		Tools  []struct{ Name string }
	}
	mustJSON(t, r.call(t.Context(), "GET", "/v1/sessions/"+sid+"/prompt", key, nil), 200, &prompt)
	var names []string
	for _, tl := range prompt.Tools {
		names = append(names, tl.Name)
	}
	return names, prompt.System
}

// runCodeScript is the scripted model's message that makes it send one run_code call of program.
func runCodeScript(program string) string {
	args, _ := json.Marshal(map[string]string{"code": program, "description": "The e2e program"})
	return "tool:run_code args:" + url.QueryEscape(string(args))
}

// runProgram posts the message that makes the model send one run_code call of program as turn
// `turn` of the session, follows the session over SSE (resuming at random points with
// Last-Event-ID) and waits for the turn's end. It checks the log's invariants, that the program's
// two sub-calls' code-dispatch events come before the outer tool/result in the stored log and in
// the stream, and that the stream delivered the stored events in the same order. It returns the
// stored events of the turn.
func runProgram(t *testing.T, c *cluster, sid string, turn int, program string) []storedEvent {
	t.Helper()
	r := c.replicas[0]
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	f := follow(ctx, r, c.key, sid, rand.New(rand.NewPCG(uint64(turn), 2)))
	if _, err := r.postMessage(ctx, c.key, sid, runCodeScript(program), "followup"); err != nil {
		t.Fatal(err)
	}
	evs := r.waitEvents(t, c.key, sid, 60*time.Second, func(evs []storedEvent) bool { return len(turnEnds(evs)) >= turn })
	if err := checkLog(evs); err != nil {
		t.Fatalf("%v\n%s", err, describe(evs))
	}
	first := int64(0)
	if turn > 1 {
		first = turnEnds(evs)[turn-2].seq + 1
	}
	this := evs[first:]
	if ends := turnEnds(this); len(ends) != 1 || ends[0].kind != "completed" {
		t.Fatalf("turn %d ends %+v, want completed\n%s", turn, ends, describe(this))
	}
	if err := dispatchOrder(this, 2); err != nil {
		t.Fatalf("stored log: %v\n%s", err, describe(this))
	}
	f.waitFor(len(evs), 30*time.Second)
	streamed, _, ferr := f.snapshot()
	if ferr != nil {
		t.Fatal(ferr)
	}
	if len(streamed) < len(evs) {
		t.Fatalf("streamed %d events of %d", len(streamed), len(evs))
	}
	for i, ev := range evs {
		if streamed[i].Seq != ev.Seq || streamed[i].Type != ev.Type || string(streamed[i].Data) != string(ev.Data) {
			t.Fatalf("streamed event %d is %s #%d %s, stored %s #%d %s", i, streamed[i].Type, streamed[i].Seq, streamed[i].Data, ev.Type, ev.Seq, ev.Data)
		}
	}
	if err := dispatchOrder(streamed[first:len(evs)], 2); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return this
}

// historyToolResults returns the text of every tool-result block of the session's history.
func historyToolResults(t *testing.T, r *replica, key, sid string) []string {
	t.Helper()
	var hist struct {
		Messages []struct {
			Content []struct {
				Type    string
				Content []struct{ Text string }
			}
		}
	}
	mustJSON(t, r.call(t.Context(), "GET", "/v1/sessions/"+sid+"/history", key, nil), 200, &hist)
	var out []string
	for _, m := range hist.Messages {
		for _, b := range m.Content {
			if b.Type == "tool-result" {
				var text []string
				for _, x := range b.Content {
					text = append(text, x.Text)
				}
				out = append(out, strings.Join(text, ""))
			}
		}
	}
	return out
}

// dispatchOrder checks that the events of one turn hold exactly one run_code call whose n
// sub-calls each log tool/code-dispatch-start, then tool/code-dispatch, all before the outer
// tool/result, with sub-call ids <outer>:code:1 to <outer>:code:<n>.
func dispatchOrder(evs []storedEvent, n int) error {
	var outer string
	started, settled := map[string]int{}, map[string]int{}
	result := -1
	for i, ev := range evs {
		switch ev.Type {
		case eventlog.TypeToolCall:
			var d struct{ CallID, Name string }
			_ = json.Unmarshal(ev.Data, &d)
			if d.Name != "run_code" || outer != "" {
				return fmt.Errorf("tool/call %s of %s, want the one run_code call", d.CallID, d.Name)
			}
			outer = d.CallID
		case eventlog.TypeToolCodeDispatchInit:
			var d eventlog.CodeDispatchStart
			_ = json.Unmarshal(ev.Data, &d)
			started[d.SubCallID] = i
		case eventlog.TypeToolCodeDispatch:
			var d eventlog.CodeDispatch
			_ = json.Unmarshal(ev.Data, &d)
			settled[d.SubCallID] = i
		case eventlog.TypeToolResult:
			result = i
		}
	}
	if outer == "" || result < 0 {
		return fmt.Errorf("no run_code call with a result (call %q, result at %d)", outer, result)
	}
	if len(started) != n || len(settled) != n {
		return fmt.Errorf("sub-calls started %v and settled %v, want %d of each", started, settled, n)
	}
	for k := 1; k <= n; k++ {
		id := fmt.Sprintf("%s:code:%d", outer, k)
		s, okS := started[id]
		d, okD := settled[id]
		if !okS || !okD || s > d || d > result {
			return fmt.Errorf("sub-call %s: start at %d (%v), settled at %d (%v); the outer tool/result at %d must come after both",
				id, s, okS, d, okD, result)
		}
	}
	return nil
}

// overlapped checks that every sub-call of the turn started before any of them settled: the
// sub-scheduler ran them at the same time. The order of the log's seqs shows it, not a clock.
func overlapped(evs []storedEvent) error {
	lastStart, firstSettle := int64(-1), int64(-1)
	for _, ev := range evs {
		switch ev.Type {
		case eventlog.TypeToolCodeDispatchInit:
			lastStart = ev.Seq
		case eventlog.TypeToolCodeDispatch:
			if firstSettle < 0 {
				firstSettle = ev.Seq
			}
		}
	}
	if lastStart < 0 || firstSettle < 0 || lastStart > firstSettle {
		return fmt.Errorf("the last sub-call started at seq %d, after the first settled at seq %d: the parallel-safe sub-calls did not overlap",
			lastStart, firstSettle)
	}
	return nil
}
