package e2e

import (
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
// one run_code program calling two tools in parallel: the log shows the code-dispatch events
// before the outer tool/result, the history has a single run_code result, and the prompt lists
// only run_code and shows the SDK; the SSE stream delivers the same events in the same order. A `both` preset offers run_code beside the native tools.
func TestCodeModeOverHTTP(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, 10*time.Second)
	r := c.replicas[0]
	ctx := t.Context()
	preset := func(mode string) string {
		var p struct{ ID string }
		mustJSON(t, r.call(ctx, "POST", "/v1/presets", c.key, map[string]any{
			"name": mode, "tools": map[string]any{"mode": mode},
			"model": map[string]string{"provider": "openai", "model": "mock", "baseUrl": c.mockURL}}), 201, &p)
		var s struct{ ID string }
		mustJSON(t, r.call(ctx, "POST", "/v1/sessions", c.key, map[string]string{"presetId": p.ID}), 201, &s)
		return s.ID
	}
	var prompt struct {
		System string
		Tools  []struct{ Name string }
	}
	names := func() []string {
		var out []string
		for _, tl := range prompt.Tools {
			out = append(out, tl.Name)
		}
		return out
	}

	sid := preset("code")
	mustJSON(t, r.call(ctx, "GET", "/v1/sessions/"+sid+"/prompt", c.key, nil), 200, &prompt)
	if got := names(); !slices.Equal(got, []string{"run_code"}) || !strings.Contains(prompt.System, "declare const tools") ||
		!strings.Contains(prompt.System, "echo") {
		t.Fatalf("code prompt: tools %v, system %q", got, prompt.System)
	}
	program := `const [a, b] = await Promise.all([tools.echo({text: "one"}), tools.echo({text: "two"})]);
console.log("saw " + a);
return b;`
	args, _ := json.Marshal(map[string]string{"code": program, "description": "Echo twice in parallel"})
	f := follow(ctx, r, c.key, sid, rand.New(rand.NewPCG(1, 2)))
	if _, err := r.postMessage(ctx, c.key, sid, "tool:run_code args:"+url.QueryEscape(string(args)), "followup"); err != nil {
		t.Fatal(err)
	}
	evs := r.waitEvents(t, c.key, sid, 60*time.Second, func(evs []storedEvent) bool { return len(turnEnds(evs)) > 0 })
	if err := checkLog(evs); err != nil {
		t.Fatalf("%v\n%s", err, describe(evs))
	}
	if err := dispatchOrder(evs); err != nil {
		t.Fatalf("stored log: %v\n%s", err, describe(evs))
	}
	// The stream (resumed at random points with Last-Event-ID) delivers the same events in the
	// same order as the stored log.
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
	if err := dispatchOrder(streamed); err != nil {
		t.Fatalf("stream: %v", err)
	}
	var hist struct {
		Messages []struct {
			Role    string
			Content []struct {
				Type    string
				Content []struct{ Text string }
			}
		}
	}
	mustJSON(t, r.call(ctx, "GET", "/v1/sessions/"+sid+"/history", c.key, nil), 200, &hist)
	var toolResults []string
	for _, m := range hist.Messages {
		for _, b := range m.Content {
			if b.Type == "tool-result" {
				toolResults = append(toolResults, b.Content[0].Text)
			}
		}
	}
	if len(toolResults) != 1 || toolResults[0] != "saw one\ntwo" {
		t.Fatalf("history tool results %q, want the single run_code result", toolResults)
	}

	both := preset("both")
	mustJSON(t, r.call(ctx, "GET", "/v1/sessions/"+both+"/prompt", c.key, nil), 200, &prompt)
	if got := names(); !slices.Contains(got, "run_code") || !slices.Contains(got, "echo") {
		t.Fatalf("both prompt tools %v, want run_code beside the native tools", got)
	}
}

// dispatchOrder checks that the code-dispatch events of the program's two sub-calls come before
// the outer run_code tool/result.
func dispatchOrder(evs []storedEvent) error {
	starts, dispatched, result := -1, -1, -1
	var subs []string
	for i, ev := range evs {
		switch ev.Type {
		case eventlog.TypeToolCodeDispatchInit:
			if starts < 0 {
				starts = i
			}
		case eventlog.TypeToolCodeDispatch:
			var d eventlog.CodeDispatch
			_ = json.Unmarshal(ev.Data, &d)
			subs = append(subs, d.SubCallID)
			dispatched = i
		case eventlog.TypeToolResult:
			result = i
		}
	}
	if starts < 0 || dispatched < 0 || result < dispatched || len(subs) != 2 || !strings.HasSuffix(subs[0], ":code:1") {
		return fmt.Errorf("code-dispatch events (start %d, last %d, sub-calls %v) must come before the outer tool/result (%d)",
			starts, dispatched, subs, result)
	}
	return nil
}
