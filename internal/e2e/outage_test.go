package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/pgtest"
	"github.com/dshd/dshd/pkg/eventlog"
)

// TestDatabaseOutageMidTurn: PostgreSQL is stopped for 6 s (the outage of issue 9 finding 8)
// in the middle of a turn of 50 tool steps that a real server process runs, then started again.
// During the outage, requests answer 503 `unavailable` problems with Retry-After (not 500), and
// posting a message is refused the same way; an SSE stream opened before it stays open. Once the
// database is back the turn goes on: it ends completed, every call answered exactly once, the
// log contiguous and valid, and the one stream delivered the whole log, each event once.
func TestDatabaseOutageMidTurn(t *testing.T) {
	t.Parallel()
	buildBinaries(t) // skips under -short before the cluster is set up
	db := pgtest.NewCluster(t)
	// A lease of 15 s outlives the outage: renewed every 5 s, it has 10 s left when the database
	// stops. (Of a 10 s lease, 6.7 s may be left: a restart that takes longer lets it expire, and
	// the sweeper then races the runner's renewal.)
	c := newClusterOn(t, 1, 15*time.Second, db.URL())
	r := c.replicas[0]
	ctx := t.Context()
	var preset struct{ ID string }
	mustJSON(t, r.call(ctx, "POST", "/v1/presets", c.key, map[string]any{
		"name":   "long turns",
		"model":  map[string]string{"provider": "openai", "model": "mock", "baseUrl": c.mockURL},
		"limits": map[string]int{"maxSteps": 100},
	}), 201, &preset)
	var sess struct{ ID string }
	mustJSON(t, r.call(ctx, "POST", "/v1/sessions", c.key, map[string]string{"presetId": preset.ID}), 201, &sess)
	sid := sess.ID

	// One stream, opened before the turn, read until the turn ends.
	type streamed struct {
		evs []storedEvent
		err error
	}
	var mu sync.Mutex
	var got streamed
	streamDone := make(chan struct{})
	go func() {
		defer close(streamDone)
		evs, err := streamUntilTurnEnd(ctx, r, c.key, sid)
		mu.Lock()
		got = streamed{evs, err}
		mu.Unlock()
	}()

	if _, err := r.postMessage(ctx, c.key, sid, `tools:1 steps:50 tool:sleep args:{"ms":100,"text":"z"}`, "followup"); err != nil {
		t.Fatal(err)
	}
	before := r.waitEvents(t, c.key, sid, 30*time.Second, func(evs []storedEvent) bool {
		return count(evs, eventlog.TypeToolResult) >= 10
	})
	db.Stop(t)
	stopped := time.Now()

	// During the outage: 503 problems with Retry-After, for reads, for the authentication of
	// every request, and for a post (which accepts nothing).
	for _, req := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/sessions/" + sid, nil},
		{"GET", "/v1/sessions/" + sid + "/events?after=-1", nil},
		{"GET", "/v1/presets/" + preset.ID, nil},
		{"POST", "/v1/sessions/" + sid + "/messages", map[string]string{"content": "text", "mode": "followup"}},
	} {
		wantUnavailable(t, r, c.key, req.method, req.path, req.body)
	}
	const outage = 6 * time.Second
	time.Sleep(time.Until(stopped.Add(outage)))
	db.Start(t)
	back := time.Now()
	t.Logf("database down for %v, after %d of 50 tool results", back.Sub(stopped).Round(time.Millisecond),
		count(before, eventlog.TypeToolResult))

	evs := r.waitEvents(t, c.key, sid, 60*time.Second, func(evs []storedEvent) bool { return len(turnEnds(evs)) > 0 })
	t.Logf("the turn ended %v after the database came back", time.Since(back).Round(time.Millisecond))
	if ends := turnEnds(evs); len(ends) != 1 || ends[0].kind != eventlog.EndCompleted {
		t.Fatalf("turn ends %+v, want one completed\n%s", ends, describe(evs))
	}
	if err := checkLog(evs); err != nil {
		t.Fatalf("%v\n%s", err, describe(evs))
	}
	if err := everyCallAnsweredOnce(evs, 50); err != nil {
		t.Fatalf("%v\n%s", err, describe(evs))
	}
	if ids := servedIDs(evs); len(ids) != 1 {
		t.Errorf("messages served %v, want the one posted before the outage", ids)
	}
	select {
	case <-streamDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not deliver the turn's end")
	}
	mu.Lock()
	defer mu.Unlock()
	if got.err != nil {
		t.Fatalf("stream: %v", got.err)
	}
	if err := sameEvents(got.evs, evs); err != nil {
		t.Fatalf("the stream that lived through the outage: %v", err)
	}
	var pause time.Duration
	for i := 1; i < len(evs); i++ {
		pause = max(pause, time.Duration(evs[i].Time-evs[i-1].Time)*time.Millisecond)
	}
	t.Logf("%d events; the longest pause between two events of the turn: %v", len(evs), pause)
}

// wantUnavailable sends a request and fails the test unless it answers a 503 `unavailable`
// problem with a Retry-After.
func wantUnavailable(t *testing.T, r *replica, key, method, path string, body any) {
	t.Helper()
	req := r.call(t.Context(), method, path, key, body)
	var p struct {
		Status int
		Code   string
	}
	if err := req.decode(http.StatusServiceUnavailable, &p); err != nil {
		t.Fatalf("%s %s during the outage: %v", method, path, err)
	}
	if p.Code != "unavailable" || p.Status != http.StatusServiceUnavailable {
		t.Errorf("%s %s during the outage: problem %+v", method, path, p)
	}
	if ra := req.header.Get("Retry-After"); ra == "" {
		t.Errorf("%s %s during the outage: no Retry-After", method, path)
	} else if n, err := strconv.Atoi(ra); err != nil || n < 1 {
		t.Errorf("%s %s during the outage: Retry-After %q", method, path, ra)
	}
	if ct := req.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s %s during the outage: Content-Type %q", method, path, ct)
	}
}

// streamUntilTurnEnd reads the session's log over one SSE connection from the start until the
// first turn/end, and fails on a gap, a duplicate, or a stream that ends before.
func streamUntilTurnEnd(ctx context.Context, r *replica, key, sid string) ([]storedEvent, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", r.url+"/v1/sessions/"+sid+"/events", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("stream status %d", resp.StatusCode)
	}
	var evs []storedEvent
	errEnd := fmt.Errorf("turn ended")
	err = readFrames(resp.Body, func(id, typ, data string) error {
		ev, err := parseEvent([]byte(data))
		if err != nil {
			return err
		}
		if ev.Seq != int64(len(evs)) {
			return fmt.Errorf("seq %d after %d events (gap or duplicate)", ev.Seq, len(evs))
		}
		evs = append(evs, ev)
		if ev.Type == eventlog.TypeTurnEnd {
			return errEnd
		}
		return nil
	})
	if err != nil && err.Error() == errEnd.Error() {
		return evs, nil
	}
	return evs, fmt.Errorf("the stream ended after %d events: %v", len(evs), err)
}

// everyCallAnsweredOnce checks that the log has calls tool calls with one successful result each.
func everyCallAnsweredOnce(evs []storedEvent, calls int) error {
	called, answered := map[string]int{}, map[string]int{}
	for _, ev := range evs {
		switch ev.Type {
		case eventlog.TypeToolCall:
			var d struct {
				CallID string `json:"callId"`
			}
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				return err
			}
			called[d.CallID]++
		case eventlog.TypeToolResult:
			d, err := eventlog.Decode[eventlog.ToolResult](ev.Event)
			if err != nil {
				return err
			}
			if d.Error != nil {
				return fmt.Errorf("call %s failed: %+v", d.Message.Source.CallID, d.Error)
			}
			answered[d.Message.Source.CallID]++
		}
	}
	if len(called) != calls || len(answered) != calls {
		return fmt.Errorf("%d calls, %d answered, want %d each", len(called), len(answered), calls)
	}
	for id, n := range called {
		if n != 1 || answered[id] != 1 {
			return fmt.Errorf("call %s: %d calls, %d results", id, n, answered[id])
		}
	}
	return nil
}
