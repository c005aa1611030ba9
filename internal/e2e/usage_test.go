package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	tenantpkg "github.com/dshd/dshd/pkg/tenant"
)

// hostedTenant is a tenant the operator created (its id known, for its limits) with a preset on
// the mock model.
type hostedTenant struct {
	id, key, presetID string
}

// hostedTenant creates a tenant with the admin token and a preset on the mock model.
func (c *cluster) hostedTenant(t *testing.T, name string) hostedTenant {
	t.Helper()
	r := c.replicas[0]
	var tn struct{ ID, APIKey string }
	mustJSON(t, r.call(t.Context(), "POST", "/v1/tenants", adminToken, map[string]string{"name": name}), 201, &tn)
	var p struct{ ID string }
	mustJSON(t, r.call(t.Context(), "POST", "/v1/presets", tn.APIKey, map[string]any{
		"name": name, "model": map[string]string{"provider": "openai", "model": "mock", "baseUrl": c.mockURL}}), 201, &p)
	return hostedTenant{id: tn.ID, key: tn.APIKey, presetID: p.ID}
}

func (h hostedTenant) session(t *testing.T, r *replica) string {
	t.Helper()
	var s struct{ ID string }
	mustJSON(t, r.call(t.Context(), "POST", "/v1/sessions", h.key, map[string]string{"presetId": h.presetID}), 201, &s)
	return s.ID
}

// setLimits sets the tenant's limits with the admin token.
func (h hostedTenant) setLimits(t *testing.T, r *replica, limits map[string]any) {
	t.Helper()
	mustJSON(t, r.call(t.Context(), "PUT", "/v1/tenants/"+h.id+"/limits", adminToken, limits), 200, nil)
}

// usageRow is a row of GET /v1/usage.
type usageRow struct {
	SessionID string         `json:"sessionId"`
	Turn      int            `json:"turn"`
	StartedAt *time.Time     `json:"startedAt"`
	EndedAt   *time.Time     `json:"endedAt"`
	EndKind   string         `json:"endKind"`
	Turns     int64          `json:"turns"`
	RunTimeMs int64          `json:"runTimeMs"`
	Usage     eventlog.Usage `json:"usage"`
}

// usage reads every page of GET /v1/usage?groupBy=g (the default range: the last 30 days).
func usage(t *testing.T, r *replica, key, g string) []usageRow {
	t.Helper()
	var out []usageRow
	cursor := ""
	for range 100 {
		var page struct {
			Items      []usageRow `json:"items"`
			NextCursor string     `json:"nextCursor"`
		}
		mustJSON(t, r.call(t.Context(), "GET", "/v1/usage?groupBy="+g+"&limit=7&cursor="+cursor, key, nil), 200, &page)
		out = append(out, page.Items...)
		if cursor = page.NextCursor; cursor == "" {
			return out
		}
	}
	t.Fatalf("usage by %s: the pages do not end", g)
	return nil
}

// TestUsageEqualsTheLogs: 50 turns over six sessions on two replicas, with model retries, failed
// model calls, failed tool calls, a cancelled turn and a turn repaired after its replica was
// killed (SIGKILL). Then every session's log, read over HTTP and folded with eventlog.UsageByTurn,
// equals GET /v1/usage exactly: per turn (usage, start, end, end kind), per session (usage, turns,
// run time) and in total.
func TestUsageEqualsTheLogs(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, 2*time.Second)
	a, b := c.replicas[0], c.replicas[1]
	ctx := t.Context()

	// The crash: a slow model call on B, which is killed while it waits; C replaces it.
	crashed := c.sessionCreate(t)
	if _, err := b.postMessage(ctx, c.key, crashed, "latency:20000", "followup"); err != nil {
		t.Fatal(err)
	}
	b.waitEvents(t, c.key, crashed, 30*time.Second, func(evs []storedEvent) bool { return count(evs, eventlog.TypeUserMessage) > 0 })
	b.kill9(t)
	cr := c.startReplica()
	live := []*replica{a, cr}

	// The cancel: a slow model call cancelled once it is under way.
	cancelled := c.sessionCreate(t)
	if _, err := a.postMessage(ctx, c.key, cancelled, "latency:20000", "followup"); err != nil {
		t.Fatal(err)
	}
	a.waitEvents(t, c.key, cancelled, 30*time.Second, func(evs []storedEvent) bool { return count(evs, eventlog.TypeUserMessage) > 0 })
	mustJSON(t, cr.call(ctx, "POST", "/v1/sessions/"+cancelled+"/cancel", c.key, map[string]any{}), 200, nil)

	scripts := []string{
		"text",
		"tools:2 steps:2",
		"fail:SERVER failtimes:1",   // one llm/retry, then an answer
		"tool:nope",                 // a failed tool result
		"fail:INVALID_CREDENTIAL",   // the turn fails on its model call
		"tools:3 tool:echo args:{}", // invalid arguments: failed results
		"reasoning:hmm say:ok",
		"fail:SERVER", // every retry fails: the turn fails after 3 calls
		"tools:1 steps:3",
		"say:done",
		"text",
	}
	// Each session's scripts have a keepalive count of their own (mockllm's keep-alive comments,
	// harmless), so that mockllm's failtimes counters, which are per request history, are per
	// session; a script must stay pure (directives only) to be read as one.
	plan := map[string][]string{crashed: {"text keepalive:5", "tools:2 keepalive:5", "fail:SERVER failtimes:1 keepalive:5"},
		cancelled: {"text keepalive:6"}}
	for i := range 4 {
		var msgs []string
		for _, s := range scripts {
			msgs = append(msgs, fmt.Sprintf("%s keepalive:%d", s, i+1))
		}
		plan[c.sessionCreate(t)] = msgs
	}
	want := 2 // the crashed and the cancelled turns
	for _, msgs := range plan {
		want += len(msgs)
	}
	if want != 50 {
		t.Fatalf("the plan has %d turns, want 50", want)
	}
	var wg sync.WaitGroup
	for sid, msgs := range plan {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, m := range msgs {
				if _, err := live[i%2].postMessage(ctx, c.key, sid, m, "followup"); err != nil {
					t.Errorf("session %s: post %q: %v", sid, m, err)
				}
			}
		}()
	}
	wg.Wait()

	logs := map[string][]eventlog.Event{}
	turns := 0
	for sid := range plan {
		n := len(plan[sid])
		if sid == crashed || sid == cancelled {
			n++
		}
		evs := a.waitEvents(t, c.key, sid, 90*time.Second, func(evs []storedEvent) bool { return len(turnEnds(evs)) == n })
		if err := checkLog(evs); err != nil {
			t.Errorf("session %s: %v", sid, err)
		}
		logs[sid] = plain(evs)
		turns += n
	}
	kinds := map[string]int{}
	retries := 0
	for _, evs := range logs {
		for _, ev := range evs {
			if ev.Type == eventlog.TypeLLMRetry {
				retries++
			}
		}
		for _, tu := range eventlog.UsageByTurn(evs) {
			kinds[tu.EndKind]++
		}
	}
	if turns != 50 || kinds[eventlog.EndInterrupted] != 1 || kinds[eventlog.EndAborted] != 1 || kinds[eventlog.EndError] != 8 || retries < 12 {
		t.Fatalf("%d turns ending %v with %d retries: want 50 turns, one interrupted, one aborted, 8 errors, at least 12 retries", turns, kinds, retries)
	}

	// Per turn.
	byTurn := map[string]usageRow{}
	for _, r := range usage(t, cr, c.key, "turn") {
		byTurn[r.SessionID+"/"+strconv.Itoa(r.Turn)] = r
	}
	var total eventlog.Usage
	var totalRun int64
	for sid, evs := range logs {
		var sum eventlog.Usage
		for _, tu := range eventlog.UsageByTurn(evs) {
			k := sid + "/" + strconv.Itoa(tu.Turn)
			got, ok := byTurn[k]
			delete(byTurn, k)
			switch {
			case !ok:
				t.Errorf("turn %s: not in the usage", k)
			case got.Usage != tu.Usage || got.Turns != 1 || got.EndKind != tu.EndKind ||
				got.StartedAt == nil || got.StartedAt.UnixMilli() != tu.StartMs || got.EndedAt == nil || got.EndedAt.UnixMilli() != tu.EndMs ||
				got.RunTimeMs != tu.EndMs-tu.StartMs:
				t.Errorf("turn %s: usage %+v, the log folds to %+v", k, got, tu)
			}
			sum.Add(tu.Usage)
			totalRun += tu.EndMs - tu.StartMs

		}
		total.Add(sum)
		byTurn["session:"+sid] = usageRow{Usage: sum, Turns: int64(len(eventlog.UsageByTurn(evs)))}
	}
	// Per session.
	for _, r := range usage(t, a, c.key, "session") {
		k := "session:" + r.SessionID
		w, ok := byTurn[k]
		delete(byTurn, k)
		if !ok || r.Usage != w.Usage || r.Turns != w.Turns {
			t.Errorf("session %s: usage %+v over %d turns, the log folds to %+v over %d", r.SessionID, r.Usage, r.Turns, w.Usage, w.Turns)
		}
	}
	if len(byTurn) != 0 {
		t.Errorf("in the logs but not in the usage: %v", byTurn)
	}
	// In total, and by day.
	tot := usage(t, cr, c.key, "none")
	if len(tot) != 1 || tot[0].Usage != total || tot[0].Turns != 50 || tot[0].RunTimeMs != totalRun {
		t.Errorf("total %+v, the logs fold to %+v over 50 turns and %d ms", tot, total, totalRun)
	}
	var days eventlog.Usage
	for _, r := range usage(t, a, c.key, "day") {
		days.Add(r.Usage)
	}
	if days != total || total.ModelErrors == 0 || total.ToolErrors == 0 || total.InputTokens == 0 {
		t.Errorf("days sum to %+v, the logs to %+v", days, total)
	}
	t.Logf("50 turns: %+v, %d ms", total, totalRun)
}

// TestRateLimitAcrossReplicas: a tenant limited to 20 requests a second with a burst of 10
// hammers both replicas at once for 3 s: the requests allowed on both together never exceed the
// burst plus the rate over the measured time (each replica refuses from its own memory of a
// refusal, which must never allow more than the database), and are at least 90% of the rate over
// it; every refusal is a 429 rate_limited problem with Retry-After and the RateLimit headers. A
// rare 503 unavailable (a slow database on a loaded machine) is tolerated, up to 2% of the
// requests. Health and metrics are never limited.
func TestRateLimitAcrossReplicas(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, 3*time.Second)
	h := c.hostedTenant(t, "limited")
	const rate, burst = 20.0, 10
	h.setLimits(t, c.replicas[0], map[string]any{"requestsPerSecond": rate, "burst": burst})
	// Both replicas apply the limit within a second; then let the burst fill up again.
	for _, r := range c.replicas {
		if err := waitFor(5*time.Second, func() (bool, error) {
			rp := r.call(t.Context(), "GET", "/v1/tools", h.key, nil)
			return rp.err == nil && rp.header.Get("RateLimit-Limit") == strconv.Itoa(burst), rp.err
		}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Duration(float64(burst)/rate*float64(time.Second)) + 100*time.Millisecond)

	var ok, limited, unavailable atomic.Int64
	var bad atomic.Value
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 8 {
		r := c.replicas[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				time.Sleep(5 * time.Millisecond) // at most 1600 requests a second in all: far past the rate
				rp := r.call(context.WithoutCancel(ctx), "GET", "/v1/sessions?limit=1", h.key, nil)
				switch {
				case rp.err != nil:
					bad.Store(rp.err.Error())
				case rp.status == http.StatusOK:
					ok.Add(1)
				case rp.status == http.StatusTooManyRequests:
					limited.Add(1)
					var p struct{ Code string }
					_ = json.Unmarshal(rp.body, &p)
					ra, _ := strconv.Atoi(rp.header.Get("Retry-After"))
					if p.Code != "rate_limited" || ra < 1 || rp.header.Get("RateLimit-Remaining") != "0" ||
						rp.header.Get("RateLimit-Limit") != "10" || rp.header.Get("RateLimit-Reset") == "" {
						bad.Store(fmt.Sprintf("a 429 %s with headers %v", rp.body, rp.header))
					}
				case rp.status == http.StatusServiceUnavailable && strings.Contains(string(rp.body), `"unavailable"`):
					unavailable.Add(1)
				default:
					bad.Store(fmt.Sprintf("status %d: %s", rp.status, rp.body))
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	if v := bad.Load(); v != nil {
		t.Fatal(v)
	}
	// The GCRA allows at most burst + rate·D in any D; the limiter's decisions were all made
	// between start and now. A 503 may have been allowed: it counts for the lower bound only.
	n, un := float64(ok.Load()), float64(unavailable.Load())
	hi, lo := rate*elapsed+burst, rate*elapsed*0.9
	t.Logf("%v allowed, %d refused, %v unavailable in %.2fs (rate %v, burst %d: %.0f to %.0f)", n, limited.Load(), un, elapsed, rate, burst, lo, hi)
	if n > hi || n+un < lo || limited.Load() == 0 {
		t.Fatalf("%v requests allowed on two replicas in %.2fs at %v/s with a burst of %d: want %.0f to %.0f", n, elapsed, rate, burst, lo, hi)
	}
	if all := n + un + float64(limited.Load()); un > all*0.02 {
		t.Fatalf("%v of %v requests answered 503 unavailable", un, all)
	}
	for _, path := range []string{"/healthz", "/metrics"} {
		for range 3 * burst {
			if rp := c.replicas[0].call(t.Context(), "GET", path, h.key, nil); rp.err != nil || rp.status != 200 {
				t.Fatalf("%s under the limit: %d %v", path, rp.status, rp.err)
			}
		}
	}
}

// TestTokenQuotaStopsTheNextTurn: with a daily token quota of 1, the turn that starts under it
// runs, and the next one, queued while the first waits 3 s for its model, ends at once with
// TOKEN_QUOTA_EXCEEDED without a model call (mockllm saw one request); a post after that answers
// 429 quota_exceeded with Retry-After.
func TestTokenQuotaStopsTheNextTurn(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, 3*time.Second)
	h := c.hostedTenant(t, "quota")
	// A generous request rate comes with the quota: its RateLimit-Limit header shows when the other
	// replica applies the new limits (a replica reads a tenant's limits as one value, so the header
	// means the quota is applied there too).
	h.setLimits(t, c.replicas[0], map[string]any{"tokensPerDay": 1, "requestsPerSecond": 1000, "burst": 999})
	r := c.replicas[1]
	if err := waitFor(5*time.Second, func() (bool, error) { // the other replica applies it within a second
		rp := r.call(t.Context(), "GET", "/v1/tools", h.key, nil)
		return rp.err == nil && rp.header.Get("RateLimit-Limit") == "999", rp.err
	}); err != nil {
		t.Fatal(err)
	}
	sid := h.session(t, r)
	before := mockRequests(t, c)
	first, err := r.postMessage(t.Context(), h.key, sid, "latency:3000 say:one%20two%20three", "followup")
	if err != nil {
		t.Fatal(err)
	}
	second, err := r.postMessage(t.Context(), h.key, sid, "text", "followup")
	if err != nil {
		t.Fatal(err)
	}
	evs := r.waitEvents(t, h.key, sid, 30*time.Second, func(evs []storedEvent) bool { return len(turnEnds(evs)) == 2 })
	ends := turnEnds(evs)
	if ends[0].kind != eventlog.EndCompleted || ends[1].kind != eventlog.EndError {
		t.Fatalf("turn ends %+v\n%s", ends, describe(evs))
	}
	var end eventlog.TurnEnd
	for _, ev := range evs {
		if ev.Type == eventlog.TypeTurnEnd {
			_ = json.Unmarshal(ev.Data, &end)
		}
	}
	if end.Reason.Error == nil || end.Reason.Error.Code != tenantpkg.CodeTokenQuotaExceeded {
		t.Fatalf("the second turn ended %+v, want %s", end.Reason, tenantpkg.CodeTokenQuotaExceeded)
	}
	if got := mockRequests(t, c) - before; got != 1 {
		t.Fatalf("mockllm got %d requests, want 1: the second turn must not call the model", got)
	}
	if ids := servedIDs(evs); ids[first.MessageID] != 1 || ids[second.MessageID] != 0 {
		t.Fatalf("served %v: the refused turn takes its message without serving it", ids)
	}
	if n := count(evs, eventlog.TypeStepStart); n != 1 {
		t.Fatalf("%d steps, want the first turn's only", n)
	}
	rp := r.call(t.Context(), "POST", "/v1/sessions/"+sid+"/messages", h.key, map[string]string{"content": "text"})
	var p struct{ Code string }
	_ = json.Unmarshal(rp.body, &p)
	if ra, _ := strconv.Atoi(rp.header.Get("Retry-After")); rp.status != 429 || p.Code != "quota_exceeded" || ra < 1 || ra > 86400 {
		t.Fatalf("a post over the quota: %d %s %v", rp.status, rp.body, rp.header)
	}
	if slices.ContainsFunc(turnEnds(evs), func(te turnEnd) bool { return te.turn > 2 }) {
		t.Fatal("a third turn ran")
	}
}

// mockRequests is how many chat requests the cluster's mockllm has received.
func mockRequests(t *testing.T, c *cluster) int {
	t.Helper()
	resp, err := client.Get(c.mockURL + "/_requests")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var reqs []json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&reqs); err != nil {
		t.Fatal(err)
	}
	return len(reqs)
}
