package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
)

// rollingSize is the scale of TestRollingRestart: the CI size by default; DSHD_ROLLING=large runs
// the size whose numbers go into the issue notes.
type rollingSize struct {
	running, parkedClient, parkedAsk, followers int
	steps                                       int // tool steps of a running turn
}

func rollingScale() rollingSize {
	if os.Getenv("DSHD_ROLLING") == "large" {
		return rollingSize{running: 150, parkedClient: 40, parkedAsk: 40, followers: 600, steps: 16}
	}
	return rollingSize{running: 50, parkedClient: 10, parkedAsk: 10, followers: 200, steps: 12}
}

// The drain bounds the replicas of TestRollingRestart run with: turns may go on to their end for
// drainFinish after SIGTERM, then hand over at their next step boundary; the process exits within
// shutdownTimeout of the signal.
const (
	drainFinish     = 500 * time.Millisecond
	shutdownTimeout = 8 * time.Second
)

// TestRollingRestart is the acceptance of issue 19's drain: two replicas are restarted one after
// the other (SIGTERM, wait for the exit, start again, then the other) while multi-step turns run,
// turns are parked on client-executed calls and on approvals, and SSE followers (on whichever
// replica is up, resuming with Last-Event-ID) read every session. Then the parked turns are
// answered, on either replica. Every turn ends completed (none interrupted), every tool call
// has exactly one result, the mock model saw each step's request once, every follower received
// every event of its session exactly once, and each replica exited within the documented bound
// (DSHD_SHUTDOWN_TIMEOUT) by itself.
func TestRollingRestart(t *testing.T) {
	t.Parallel()
	size := rollingScale()
	c := newClusterOn(t, 2, 10*time.Second, "", "DSHD_DRAIN_FINISH="+drainFinish.String(),
		"DSHD_SHUTDOWN_TIMEOUT="+shutdownTimeout.String(), "DSHD_TENANT_MAX_TURNS=1000", "DSHD_MAX_UNAUTHENTICATED=4096")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	first := c.replicas[0]

	var parkPreset struct{ ID string }
	mustJSON(t, first.call(ctx, "POST", "/v1/presets", c.key, map[string]any{
		"name":  "rolling-park",
		"model": map[string]string{"provider": "openai", "model": "mock", "baseUrl": c.mockURL},
		"tools": map[string]any{"declared": []map[string]any{{"name": "pick", "executor": "client",
			"description": "the user picks", "parameters": map[string]any{"type": "object"}}}},
		"approval": map[string]any{"policy": "ask", "ask": []string{"echo"}, "timeoutMs": 600_000},
	}), 201, &parkPreset)

	// live is a replica that is up: the followers and the answers use whichever is.
	var mu sync.Mutex
	up := []*replica{c.replicas[0], c.replicas[1]}
	live := func() *replica {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range up {
			if r.running() {
				return r
			}
		}
		return up[0]
	}

	type run struct {
		id, content string
		parked      string // "", "client" or "approval"
	}
	var runs []run
	for i := range size.running {
		runs = append(runs, run{id: c.sessionCreate(t), content: fmt.Sprintf("tools:2 steps:%d latency:400 say:running-%d", size.steps, i)})
	}
	for i := range size.parkedClient + size.parkedAsk {
		var s struct{ ID string }
		mustJSON(t, first.call(ctx, "POST", "/v1/sessions", c.key, map[string]string{"presetId": parkPreset.ID}), 201, &s)
		r := run{id: s.ID, parked: "client", content: fmt.Sprintf(`tool:pick args:{} say:parked-%d`, i)}
		if i >= size.parkedClient {
			r.parked, r.content = "approval", fmt.Sprintf(`tool:echo args:{"text":"asked-%d"} say:parked-%d`, i, i)
		}
		runs = append(runs, r)
	}
	streamCtx, stopStreams := context.WithCancel(ctx)
	defer stopStreams()
	followers := map[string][]*follower{}
	for i := range size.followers {
		sid := runs[i%len(runs)].id
		f := followLazy(streamCtx, live, c.key, sid, rand.New(rand.NewPCG(uint64(i), 7)))
		followers[sid] = append(followers[sid], f)
	}

	// The parked turns park first; then the running turns start and the restarts begin.
	for i, r := range runs {
		if r.parked == "" {
			continue
		}
		if _, err := c.replicas[i%2].postMessage(ctx, c.key, r.id, r.content, "followup"); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range runs {
		if r.parked == "" {
			continue
		}
		want := "waiting-" + r.parked
		if err := waitFor(60*time.Second, func() (bool, error) {
			var s struct{ Status string }
			err := live().call(ctx, "GET", "/v1/sessions/"+r.id, c.key, nil).decode(200, &s)
			return s.Status == want, err
		}); err != nil {
			t.Fatalf("session %s is not %s: %v", r.id, want, err)
		}
	}
	for i, r := range runs {
		if r.parked != "" {
			continue
		}
		if _, err := c.replicas[i%2].postMessage(ctx, c.key, r.id, r.content, "followup"); err != nil {
			t.Fatal(err)
		}
	}

	// The rolling restart: each replica in turn gets SIGTERM, exits by itself within the bound,
	// and is started again.
	for k := range 2 {
		time.Sleep(300 * time.Millisecond) // turns are in their steps
		old := up[k]
		took, exited := sigtermAndWait(old, shutdownTimeout+10*time.Second)
		if !exited {
			t.Fatalf("%s did not exit within %v of SIGTERM\n%s", old.name, shutdownTimeout+10*time.Second, old.output())
		}
		t.Logf("%s exited %v after SIGTERM (bound %v)", old.name, took.Round(time.Millisecond), shutdownTimeout)
		if took > shutdownTimeout+2*time.Second {
			t.Errorf("%s took %v to exit, beyond DSHD_SHUTDOWN_TIMEOUT %v", old.name, took, shutdownTimeout)
		}
		r := c.startReplica()
		mu.Lock()
		up[k] = r
		mu.Unlock()
	}

	// The parked turns are answered, each on either replica.
	rng := rand.New(rand.NewPCG(1, 2))
	for _, r := range runs {
		if r.parked == "" {
			continue
		}
		evs, err := live().events(ctx, c.key, r.id)
		if err != nil {
			t.Fatal(err)
		}
		p, ok := eventlog.Parked(plain(evs))
		if !ok || len(p.Waits) != 1 {
			t.Fatalf("session %s: not parked on one call after the restarts\n%s", r.id, describe(evs))
		}
		via := up[rng.IntN(2)]
		var rp reply
		if r.parked == "client" {
			rp = via.call(ctx, "POST", "/v1/sessions/"+r.id+"/tool-results", c.key,
				map[string]any{"callId": p.Waits[0].CallID, "content": "picked"})
		} else {
			rp = via.call(ctx, "POST", "/v1/sessions/"+r.id+"/approvals/"+p.Waits[0].ApprovalID, c.key,
				map[string]string{"outcome": "allowed-once"})
		}
		if rp.status != http.StatusOK {
			t.Fatalf("session %s: answer on %s: %d %s", r.id, via.name, rp.status, rp.body)
		}
	}

	// Every turn completes; the logs, the followers and the model's requests are checked.
	for _, r := range runs {
		evs := live().waitEvents(t, c.key, r.id, 120*time.Second, func(evs []storedEvent) bool { return len(turnEnds(evs)) > 0 })
		if err := checkLog(evs); err != nil {
			t.Errorf("session %s: %v\n%s", r.id, err, describe(evs))
		}
		for _, te := range turnEnds(evs) {
			if te.kind != "completed" {
				t.Errorf("session %s: turn %d ended %q\n%s", r.id, te.turn, te.kind, describe(evs))
			}
		}
		if err := oneResultEach(evs); err != nil {
			t.Errorf("session %s: %v\n%s", r.id, err, describe(evs))
		}
		for _, f := range followers[r.id] {
			f.waitFor(len(evs), 60*time.Second)
			streamed, _, err := f.snapshot()
			if err == nil {
				err = sameEvents(streamed[:min(len(streamed), len(evs))], evs)
			}
			if err != nil {
				t.Errorf("session %s: the follower's stream is not the log: %v", r.id, err)
			}
		}
	}
	stopStreams()
	seen := map[string]int{}
	for _, call := range c.mockCalls(t) {
		var body struct{ Messages json.RawMessage }
		if err := json.Unmarshal(call.Body, &body); err != nil {
			t.Fatal(err)
		}
		seen[string(body.Messages)]++
	}
	dups := 0
	for _, n := range seen {
		if n > 1 {
			dups++
		}
	}
	if dups > 0 {
		t.Errorf("%d model requests were made more than once (a step served twice)", dups)
	}
	handovers, resumes := 0, 0
	for _, r := range runs {
		evs, _ := live().events(ctx, c.key, r.id)
		for _, ev := range evs {
			switch ev.Type {
			case eventlog.TypeTurnParked:
				if d, err := eventlog.Decode[eventlog.TurnParked](ev.Event); err == nil && d.Reason == eventlog.ParkHandover {
					handovers++
				}
			case eventlog.TypeTurnResumed:
				resumes++
			}
		}
	}
	if handovers == 0 {
		t.Errorf("no turn was handed over: the restarts found no turn running")
	}
	t.Logf("%d sessions (%d running, %d parked), %d followers, %d model requests; %d handovers, %d resumes",
		len(runs), size.running, size.parkedClient+size.parkedAsk, size.followers, len(seen), handovers, resumes)
}

// sigtermAndWait sends SIGTERM to the replica and waits up to bound for it to exit; it reports how
// long the exit took and whether it came (a replica still up at the bound is killed).
func sigtermAndWait(r *replica, bound time.Duration) (time.Duration, bool) {
	start := time.Now()
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
		return time.Since(start), true
	case <-time.After(bound):
		_ = r.cmd.Process.Kill()
		<-r.exited
		return time.Since(start), false
	}
}

// oneResultEach checks that every tool/call of the log has exactly one tool/result.
func oneResultEach(evs []storedEvent) error {
	calls, results := map[string]int{}, map[string]int{}
	for _, ev := range evs {
		switch ev.Type {
		case eventlog.TypeToolCall:
			if d, err := eventlog.Decode[eventlog.ToolCall](ev.Event); err == nil {
				calls[d.CallID]++
			}
		case eventlog.TypeToolResult:
			if d, err := eventlog.Decode[eventlog.ToolResult](ev.Event); err == nil {
				results[d.Message.Source.CallID]++
			}
		}
	}
	for id, n := range calls {
		if n != 1 || results[id] != 1 {
			return fmt.Errorf("call %s: %d tool/call and %d tool/result events", id, n, results[id])
		}
	}
	if len(results) != len(calls) {
		return fmt.Errorf("%d calls, %d results", len(calls), len(results))
	}
	return nil
}
