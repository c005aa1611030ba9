package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
)

// held counts, among sessions, the run leases held and not expired and the tenant turn slots
// whose recorded lease is live, read from the database.
func held(t *testing.T, dbURL string, sessions []string) (leases, slots int) {
	t.Helper()
	ids := make([]uuid.UUID, len(sessions))
	for i, s := range sessions {
		ids[i] = uuid.MustParse(s)
	}
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM session_counters
		WHERE session_id = ANY($1) AND run_owner IS NOT NULL AND run_lease_until > now()`, ids).Scan(&leases); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM tenant_turn_slots s
		JOIN session_counters c ON c.session_id = s.session_id AND c.run_owner = s.owner AND c.run_lease_until > now()
		WHERE s.session_id = ANY($1)`, ids).Scan(&slots); err != nil {
		t.Fatal(err)
	}
	return leases, slots
}

// waitStatus waits until the session's status on r is want.
func waitStatus(t *testing.T, r *replica, key, sid, want string) {
	t.Helper()
	var got string
	if err := waitFor(60*time.Second, func() (bool, error) {
		var s struct{ Status string }
		err := r.call(t.Context(), "GET", "/v1/sessions/"+sid, key, nil).decode(http.StatusOK, &s)
		got = s.Status
		return got == want, err
	}); err != nil {
		t.Fatalf("session %s is %q, not %s: %v", sid, got, want, err)
	}
}

// parkOf reads the session's log on r and returns its park, failing unless it is parked.
func parkOf(t *testing.T, r *replica, key, sid string) eventlog.Park {
	t.Helper()
	evs, err := r.events(t.Context(), key, sid)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := eventlog.Parked(plain(evs))
	if !ok {
		t.Fatalf("session %s is not parked\n%s", sid, describe(evs))
	}
	return p
}

// TestParkedApprovalsHoldNothing is the acceptance of issue 19's parked approvals: a tenant whose
// turn bound is 2 has 50 sessions waiting on approvals; the database shows they hold no run lease
// and no turn slot, the same tenant's other turns and another tenant's turns run meanwhile, and
// each answer, posted to a random replica, resumes its turn to completion.
func TestParkedApprovalsHoldNothing(t *testing.T) {
	t.Parallel()
	c := newClusterOn(t, 2, 10*time.Second, "", "DSHD_TENANT_MAX_TURNS=2")
	ctx := t.Context()
	var p struct{ ID string }
	mustJSON(t, c.replicas[0].call(ctx, "POST", "/v1/presets", c.key, map[string]any{
		"name":     "ask-echo",
		"model":    map[string]string{"provider": "openai", "model": "mock", "baseUrl": c.mockURL},
		"approval": map[string]any{"policy": "ask", "ask": []string{"echo"}, "timeoutMs": 600_000},
	}), 201, &p)
	const n = 50
	sessions := make([]string, n)
	for i := range sessions {
		var s struct{ ID string }
		mustJSON(t, c.replicas[i%2].call(ctx, "POST", "/v1/sessions", c.key, map[string]string{"presetId": p.ID}), 201, &s)
		sessions[i] = s.ID
		if _, err := c.replicas[i%2].postMessage(ctx, c.key, s.ID, fmt.Sprintf(`tool:echo args:{"text":"asked-%d"}`, i), "followup"); err != nil {
			t.Fatal(err)
		}
	}
	for _, sid := range sessions {
		waitStatus(t, c.replicas[0], c.key, sid, "waiting-approval")
	}
	// A session reads as waiting once its turn/parked is committed; its serve gives the lease and
	// the slot up right after, in a statement of its own (well inside the lease's 10 s, so a lease
	// that is never given up still fails).
	var leases, slots int
	if err := waitFor(3*time.Second, func() (bool, error) {
		leases, slots = held(t, c.dbURL, sessions)
		return leases == 0 && slots == 0, nil
	}); err != nil {
		t.Fatalf("%d sessions waiting on approvals hold %d leases and %d turn slots, want 0 and 0", n, leases, slots)
	}
	// Meanwhile the same tenant (bound 2) and another tenant run turns.
	other := c.otherTenant(t)
	busy := c.sessionCreate(t)
	for i := range 3 {
		if _, err := c.replicas[i%2].postMessage(ctx, c.key, busy, "tools:1", "followup"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.replicas[(i+1)%2].postMessage(ctx, other.key, other.sid, "tools:1", "followup"); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []tenant{{c.key, busy}, other} {
		c.replicas[0].waitEvents(t, s.key, s.sid, 60*time.Second, func(evs []storedEvent) bool { return len(turnEnds(evs)) == 3 })
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, sid := range sessions {
		pk := parkOf(t, c.replicas[0], c.key, sid)
		via := c.replicas[rng.IntN(2)]
		if rp := via.call(ctx, "POST", "/v1/sessions/"+sid+"/approvals/"+pk.Waits[0].ApprovalID, c.key,
			map[string]string{"outcome": "allowed-once"}); rp.status != http.StatusOK {
			t.Fatalf("answer on %s: %d %s", via.name, rp.status, rp.body)
		}
	}
	for i, sid := range sessions {
		evs := c.replicas[1].waitEvents(t, c.key, sid, 60*time.Second, func(evs []storedEvent) bool { return len(turnEnds(evs)) == 1 })
		if err := checkLog(evs); err != nil {
			t.Fatalf("session %s: %v\n%s", sid, err, describe(evs))
		}
		if te := turnEnds(evs)[0]; te.kind != "completed" || !strings.Contains(resultTexts(evs), fmt.Sprintf("asked-%d", i)) {
			t.Fatalf("session %s: turn ended %q, results %s\n%s", sid, te.kind, resultTexts(evs), describe(evs))
		}
	}
}

// resultTexts joins the data of the log's tool/result events.
func resultTexts(evs []storedEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type == eventlog.TypeToolResult {
			b.Write(ev.Data)
		}
	}
	return b.String()
}

// resultCodes returns, by call id, the error code of each tool/result ("" for a success) and the
// call ids in the order of their results.
func resultCodes(evs []storedEvent) (map[string]string, []string) {
	codes := map[string]string{}
	var order []string
	for _, ev := range evs {
		if d, err := eventlog.Decode[eventlog.ToolResult](ev.Event); err == nil && ev.Type == eventlog.TypeToolResult {
			code := ""
			if d.Error != nil {
				code = d.Error.Code
			}
			codes[d.Message.Source.CallID] = code
			order = append(order, d.Message.Source.CallID)
		}
	}
	return codes, order
}

// TestClientToolsOnTwoReplicas is the acceptance of issue 19's client-executed tools, on two
// replicas: a result posted to either replica resumes the turn and reaches the model; a second
// answer is 409; an unanswered call times out (TOOL_TIMEOUT); a cancel while parked ends the turn
// aborted with the call ABORTED; three parallel calls answered in reverse order commit in model
// order; and a turn parked while every replica is killed with SIGKILL resumes when its result is
// posted after the restart, its log whole.
func TestClientToolsOnTwoReplicas(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, 5*time.Second)
	ctx := t.Context()
	var p struct{ ID string }
	mustJSON(t, c.replicas[0].call(ctx, "POST", "/v1/presets", c.key, map[string]any{
		"name":  "client-tools",
		"model": map[string]string{"provider": "openai", "model": "mock", "baseUrl": c.mockURL},
		"tools": map[string]any{"declared": []map[string]any{
			{"name": "pick", "executor": "client", "description": "the user picks one",
				"parameters": map[string]any{"type": "object", "properties": map[string]any{"from": map[string]any{"type": "string"}}}},
			{"name": "glance", "executor": "client", "description": "a quick look", "timeoutMs": 1500,
				"parameters": map[string]any{"type": "object"}},
		}},
	}), 201, &p)
	session := func(content string) string {
		var s struct{ ID string }
		mustJSON(t, c.replicas[0].call(ctx, "POST", "/v1/sessions", c.key, map[string]string{"presetId": p.ID}), 201, &s)
		if _, err := c.replicas[1].postMessage(ctx, c.key, s.ID, content, "followup"); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, c.replicas[0], c.key, s.ID, "waiting-client")
		return s.ID
	}
	answer := func(r *replica, sid, callID, content string) reply {
		return r.call(ctx, "POST", "/v1/sessions/"+sid+"/tool-results", c.key, map[string]any{"callId": callID, "content": content})
	}
	ended := func(sid string) []storedEvent {
		evs := c.replicas[0].waitEvents(t, c.key, sid, 60*time.Second, func(evs []storedEvent) bool { return len(turnEnds(evs)) == 1 })
		if err := checkLog(evs); err != nil {
			t.Fatalf("session %s: %v\n%s", sid, err, describe(evs))
		}
		return evs
	}

	// Answered on the other replica; a second answer is a conflict; the model gets the result.
	answered := session(`tool:pick args:{"from":"abc"}`)
	callID := parkOf(t, c.replicas[0], c.key, answered).Waits[0].CallID
	if rp := answer(c.replicas[1], answered, callID, "picked b"); rp.status != http.StatusOK {
		t.Fatalf("result: %d %s", rp.status, rp.body)
	}
	if rp := answer(c.replicas[0], answered, callID, "again"); rp.status != http.StatusConflict || !strings.Contains(string(rp.body), fault.Conflict) {
		t.Fatalf("a second result: %d %s, want 409 conflict", rp.status, rp.body)
	}
	evs := ended(answered)
	if te := turnEnds(evs)[0]; te.kind != "completed" || !strings.Contains(resultTexts(evs), "picked b") {
		t.Fatalf("answered: %q %s", te.kind, resultTexts(evs))
	}
	if out, err := toolMessageSent(c.mockURL, callID); err != nil || !strings.Contains(out, "picked b") {
		t.Fatalf("the model's tool message: %q %v", out, err)
	}

	// Unanswered: the deadline job times the call out.
	timedOut := session(`tool:glance args:{}`)
	evs = ended(timedOut)
	if codes, _ := resultCodes(evs); len(codes) != 1 || !slices.Contains(mapValues(codes), fault.CodeToolTimeout) {
		t.Fatalf("timed out: results %v\n%s", codes, describe(evs))
	}

	// Cancelled while parked.
	cancelled := session(`tool:pick args:{}`)
	if rp := c.replicas[1].call(ctx, "POST", "/v1/sessions/"+cancelled+"/cancel", c.key, map[string]any{}); rp.status/100 != 2 {
		t.Fatalf("cancel: %d %s", rp.status, rp.body)
	}
	evs = ended(cancelled)
	if codes, _ := resultCodes(evs); turnEnds(evs)[0].kind != "aborted" || !slices.Contains(mapValues(codes), fault.CodeAborted) {
		t.Fatalf("cancelled: %q %v\n%s", turnEnds(evs)[0].kind, codes, describe(evs))
	}

	// Three parallel calls, answered last first on alternating replicas.
	parallel := session(`tool:pick tools:3 args:{}`)
	waits := parkOf(t, c.replicas[0], c.key, parallel).Waits
	if len(waits) != 3 {
		t.Fatalf("parallel: %d waits", len(waits))
	}
	for i := len(waits) - 1; i >= 0; i-- {
		if rp := answer(c.replicas[i%2], parallel, waits[i].CallID, fmt.Sprintf("answer %d", i)); rp.status != http.StatusOK {
			t.Fatalf("parallel result %d: %d %s", i, rp.status, rp.body)
		}
	}
	evs = ended(parallel)
	if _, order := resultCodes(evs); len(order) != 3 || order[0] != waits[0].CallID || order[2] != waits[2].CallID {
		t.Fatalf("parallel: results in the order %v, want %v", order, waits)
	}

	// Every replica killed while a turn is parked: the result posted after the restart resumes it.
	survivor := session(`tool:pick args:{}`)
	callID = parkOf(t, c.replicas[0], c.key, survivor).Waits[0].CallID
	for _, r := range c.replicas {
		r.kill9(t)
	}
	a, b := c.startReplica(), c.startReplica()
	if rp := answer(b, survivor, callID, "after the crash"); rp.status != http.StatusOK {
		t.Fatalf("result after the restart: %d %s", rp.status, rp.body)
	}
	evs = a.waitEvents(t, c.key, survivor, 60*time.Second, func(evs []storedEvent) bool { return len(turnEnds(evs)) == 1 })
	if err := checkLog(evs); err != nil {
		t.Fatalf("survivor: %v\n%s", err, describe(evs))
	}
	if te := turnEnds(evs)[0]; te.kind != "completed" || !strings.Contains(resultTexts(evs), "after the crash") {
		t.Fatalf("survivor: %q %s\n%s", te.kind, resultTexts(evs), describe(evs))
	}
	if count(evs, eventlog.TypeTurnResumed) != 1 {
		t.Fatalf("survivor: %d turn/resumed, want 1\n%s", count(evs, eventlog.TypeTurnResumed), describe(evs))
	}
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
