package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/webhook"
)

// hookReceiver is a tenant's webhook receiver: it verifies every delivery's signature, refuses
// the first delivery of each webhook-id with a 500 and accepts the later ones, deduplicating
// by webhook-id as the documentation tells receivers to.
type hookReceiver struct {
	secret string // set once the endpoint is registered

	mu       sync.Mutex
	attempts map[string]int            // deliveries seen, per webhook-id
	accepted map[string]int            // deliveries answered 2xx, per webhook-id
	bodies   map[string]webhookPayload // the accepted body, per webhook-id
	bad      []string                  // what was wrong with a delivery
}

type webhookPayload struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"createdAt"`
	Data      struct {
		SessionID  string `json:"sessionId"`
		Seq        int64  `json:"seq"`
		Turn       int    `json:"turn"`
		ApprovalID string `json:"approvalId"`
		ToolName   string `json:"toolName"`
		Reason     *struct {
			Kind string `json:"kind"`
		} `json:"reason"`
	} `json:"data"`
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	id := r.Header.Get(webhook.HeaderID)
	if err := webhook.Verify(h.secret, r.Header, body, time.Now(), webhook.DefaultTolerance); err != nil {
		h.bad = append(h.bad, fmt.Sprintf("%s: %v", id, err))
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var p webhookPayload
	if err := json.Unmarshal(body, &p); err != nil || p.ID != id || r.Header.Get("Content-Type") != "application/json" {
		h.bad = append(h.bad, fmt.Sprintf("%s: body %s (%v)", id, body, err))
	}
	h.attempts[id]++
	if h.attempts[id] == 1 {
		w.WriteHeader(http.StatusInternalServerError) // the first delivery fails
		return
	}
	h.accepted[id]++
	h.bodies[id] = p
	w.WriteHeader(http.StatusNoContent)
}

// TestWebhooksDeliverEachEventOnce: on two real server processes, a tenant's endpoint (an
// in-test receiver on 127.0.0.1, allowed by the operator's settings) subscribed to every event
// type; turns that complete, fail (a model failure without retries) and ask an approval
// (answered on the other replica), each leaving its session idle. The receiver refuses the first
// delivery of every event: each is retried and accepted exactly once, with a valid signature
// on every attempt, the body its event; the events delivered are exactly those the logs imply;
// the delivery log shows two attempts for each.
func TestWebhooksDeliverEachEventOnce(t *testing.T) {
	t.Parallel()
	rc := &hookReceiver{attempts: map[string]int{}, accepted: map[string]int{}, bodies: map[string]webhookPayload{}}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	c := newClusterOn(t, 2, 10*time.Second, "", "DSHD_WEBHOOK_ALLOW_HTTP=1", "DSHD_WEBHOOK_ALLOW_PRIVATE=1",
		"DSHD_WEBHOOK_RETRY_BASE=200ms", "DSHD_WEBHOOK_RETRY_MAX=1s", "DSHD_WEBHOOK_POLL=100ms")
	first, second := c.replicas[0], c.replicas[1]
	ctx := t.Context()

	var ep struct{ ID, Secret string }
	mustJSON(t, first.call(ctx, "POST", "/v1/webhooks", c.key, map[string]any{"url": srv.URL + "/dshd",
		"events": []string{"turn.completed", "turn.failed", "approval.requested", "session.idle"}}), 201, &ep)
	rc.mu.Lock()
	rc.secret = ep.Secret
	rc.mu.Unlock()

	var ask, sAsk struct{ ID string }
	mustJSON(t, first.call(ctx, "POST", "/v1/presets", c.key, map[string]any{
		"name":     "ask-echo",
		"model":    map[string]string{"provider": "openai", "model": "mock", "baseUrl": c.mockURL},
		"approval": map[string]any{"policy": "ask", "ask": []string{"echo"}, "timeoutMs": 60000},
	}), 201, &ask)
	mustJSON(t, first.call(ctx, "POST", "/v1/sessions", c.key, map[string]string{"presetId": ask.ID}), 201, &sAsk)
	done, failed := c.sessionCreate(t), c.sessionCreate(t)
	if _, err := first.postMessage(ctx, c.key, done, "say:hello", "followup"); err != nil {
		t.Fatal(err)
	}
	if _, err := second.postMessage(ctx, c.key, failed, "fail:INVALID_CREDENTIAL", "followup"); err != nil {
		t.Fatal(err)
	}
	if _, err := first.postMessage(ctx, c.key, sAsk.ID, "tool:echo args:"+url.QueryEscape(`{"text":"x"}`), "followup"); err != nil {
		t.Fatal(err)
	}
	apPath := "/v1/sessions/" + sAsk.ID + "/approvals"
	var pending struct{ Items []struct{ ID string } }
	if err := waitFor(60*time.Second, func() (bool, error) {
		err := second.call(ctx, "GET", apPath, c.key, nil).decode(200, &pending)
		return err == nil && len(pending.Items) == 1, err
	}); err != nil {
		t.Fatalf("no pending approval: %v", err)
	}
	mustJSON(t, second.call(ctx, "POST", apPath+"/"+pending.Items[0].ID, c.key, map[string]string{"outcome": "allowed-once"}), 200, nil)

	// What the logs imply: a turn.completed or turn.failed per turn/end, an approval.requested
	// per approval/asked, and the session.idle of each session's last release, at its last seq.
	want := map[string]string{} // webhook-id -> type
	for _, sid := range []string{done, failed, sAsk.ID} {
		evs := first.waitEvents(t, c.key, sid, 60*time.Second, func(evs []storedEvent) bool { return len(turnEnds(evs)) == 1 })
		if err := checkLog(evs); err != nil {
			t.Fatalf("%v\n%s", err, describe(evs))
		}
		for _, ev := range evs {
			switch ev.Type {
			case eventlog.TypeTurnEnd:
				typ := "turn.completed"
				if te := turnEnds([]storedEvent{ev}); te[0].kind == "error" {
					typ = "turn.failed"
				}
				want[fmt.Sprintf("%s:%d:%s", sid, ev.Seq, typ)] = typ
			case eventlog.TypeApprovalAsked:
				want[fmt.Sprintf("%s:%d:approval.requested", sid, ev.Seq)] = "approval.requested"
			}
		}
		want[fmt.Sprintf("%s:%d:session.idle", sid, evs[len(evs)-1].Seq)] = "session.idle"
	}
	kinds := map[string]int{}
	for _, typ := range want {
		kinds[typ]++
	}
	if kinds["turn.completed"] != 2 || kinds["turn.failed"] != 1 || kinds["approval.requested"] != 1 || kinds["session.idle"] != 3 {
		t.Fatalf("the logs imply %v", want)
	}

	type delivery struct {
		ID, EventID, EventType, Status string
		Attempts                       int
		LastStatus                     *int
		LastError                      *string
	}
	var log []delivery
	deliveriesPath := "/v1/webhooks/" + ep.ID + "/deliveries?limit=500"
	err := waitFor(60*time.Second, func() (bool, error) {
		var page struct{ Items []delivery }
		if err := second.call(ctx, "GET", deliveriesPath, c.key, nil).decode(200, &page); err != nil {
			return false, err
		}
		log = page.Items
		rc.mu.Lock()
		defer rc.mu.Unlock()
		for id := range want {
			if rc.accepted[id] == 0 {
				return false, nil
			}
		}
		return !slices.ContainsFunc(log, func(d delivery) bool { return d.Status != "delivered" }), nil
	})
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if err != nil {
		t.Fatalf("%v: accepted %v, want %v; delivery log %+v", err, rc.accepted, want, log)
	}
	if len(rc.bad) > 0 {
		t.Fatalf("bad deliveries: %s", strings.Join(rc.bad, "\n"))
	}
	// Exactly the implied events, each accepted once after one refused attempt.
	if len(rc.accepted) != len(want) {
		t.Fatalf("accepted %v, want %v", rc.accepted, want)
	}
	for id, typ := range want {
		p := rc.bodies[id]
		if rc.accepted[id] != 1 || rc.attempts[id] != 2 || p.Type != typ || !strings.HasPrefix(id, p.Data.SessionID+":") {
			t.Errorf("%s: accepted %d times after %d attempts, body %+v", id, rc.accepted[id], rc.attempts[id], p)
		}
		switch typ {
		case "approval.requested":
			if p.Data.ToolName != "echo" || p.Data.ApprovalID != pending.Items[0].ID {
				t.Errorf("approval.requested %+v", p.Data)
			}
		case "turn.failed":
			if p.Data.Reason == nil || p.Data.Reason.Kind != "error" || p.Data.Turn != 1 {
				t.Errorf("turn.failed %+v", p.Data)
			}
		}
	}
	if len(log) != len(want) {
		t.Fatalf("delivery log %+v, want %d entries", log, len(want))
	}
	for _, d := range log {
		if want[d.EventID] != d.EventType || d.Attempts != 2 || d.LastStatus == nil || *d.LastStatus != 204 || d.LastError != nil {
			t.Errorf("delivery %+v", d)
		}
	}
	// The secret was shown once: no read of the endpoint and no log line repeats it.
	key := strings.TrimPrefix(ep.Secret, "whsec_")
	for _, path := range []string{"/v1/webhooks", "/v1/webhooks/" + ep.ID, deliveriesPath} {
		if rp := first.call(ctx, "GET", path, c.key, nil); rp.err != nil || strings.Contains(string(rp.body), key) {
			t.Errorf("GET %s shows the secret (%v)", path, rp.err)
		}
	}
	for _, r := range c.replicas {
		if strings.Contains(r.output(), key) {
			t.Errorf("%s logged the secret", r.name)
		}
	}
}

// TestWebhookDeliverySurvivesACrash: while the receiver is down, the replica that attempts the
// deliveries is killed (SIGKILL); the deliveries are rows, so a replica started afterwards
// delivers them once the receiver is back, each accepted once with a valid signature.
func TestWebhookDeliverySurvivesACrash(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	up, secret := false, ""
	accepted, refused := map[string]int{}, map[string]int{} // by delivery (webhook-id)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if err := webhook.Verify(secret, r.Header, body, time.Now(), webhook.DefaultTolerance); err != nil {
			t.Errorf("delivery %s: %v", r.Header.Get(webhook.HeaderID), err)
		}
		if !up {
			refused[r.Header.Get(webhook.HeaderID)]++
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		accepted[r.Header.Get(webhook.HeaderID)]++
	}))
	t.Cleanup(srv.Close)
	c := newClusterOn(t, 1, 10*time.Second, "", "DSHD_WEBHOOK_ALLOW_HTTP=1", "DSHD_WEBHOOK_ALLOW_PRIVATE=1",
		"DSHD_WEBHOOK_RETRY_BASE=200ms", "DSHD_WEBHOOK_RETRY_MAX=1s", "DSHD_WEBHOOK_POLL=100ms", "DSHD_WEBHOOK_TIMEOUT=2s")
	ctx := t.Context()
	var ep struct{ ID, Secret string }
	mustJSON(t, c.replicas[0].call(ctx, "POST", "/v1/webhooks", c.key, map[string]any{"url": srv.URL,
		"events": []string{"turn.completed"}}), 201, &ep)
	mu.Lock()
	secret = ep.Secret
	mu.Unlock()
	sid := c.sessionCreate(t)
	for range 3 {
		if _, err := c.replicas[0].postMessage(ctx, c.key, sid, "say:hi", "followup"); err != nil {
			t.Fatal(err)
		}
	}
	// Three turns, each delivery refused at least once by the receiver (an attempt the log counts
	// may still be on its way when the replica is killed: the receiver's count is what matters).
	type delivery struct {
		EventID, Status string
		Attempts        int
	}
	var log []delivery
	read := func(r *replica) error {
		var page struct{ Items []delivery }
		err := r.call(ctx, "GET", "/v1/webhooks/"+ep.ID+"/deliveries", c.key, nil).decode(200, &page)
		log = page.Items
		return err
	}
	if err := waitFor(60*time.Second, func() (bool, error) {
		err := read(c.replicas[0])
		mu.Lock()
		defer mu.Unlock()
		return len(log) == 3 && len(refused) == 3, err
	}); err != nil {
		t.Fatalf("%v: %+v, refused %v", err, log, refused)
	}
	c.replicas[0].kill9(t)
	mu.Lock()
	up = true
	mu.Unlock()
	next := c.startReplica()
	// A delivery the dead replica had claimed is due again after its lease (DSHD_WEBHOOK_TIMEOUT
	// + 30 s); the others at their next attempt.
	if err := waitFor(90*time.Second, func() (bool, error) {
		err := read(next)
		return len(log) == 3 && !slices.ContainsFunc(log, func(d delivery) bool { return d.Status != "delivered" }), err
	}); err != nil {
		t.Fatalf("%v: %+v", err, log)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(accepted) != 3 || len(refused) != 3 {
		t.Fatalf("accepted %v after refusals %v", accepted, refused)
	}
	for _, d := range log {
		if accepted[d.EventID] != 1 || refused[d.EventID] == 0 {
			t.Fatalf("%s accepted %d times after %d refusals", d.EventID, accepted[d.EventID], refused[d.EventID])
		}
	}
}

// stuckReceiver answers no delivery until released (or the request ends), counting those in
// flight, the most at once and all it saw.
type stuckReceiver struct {
	release chan struct{}

	mu                       sync.Mutex
	inFlight, most, requests int
}

func (s *stuckReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests++
	s.inFlight++
	s.most = max(s.most, s.inFlight)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	select {
	case <-s.release:
	case <-r.Context().Done():
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *stuckReceiver) state() (inFlight, most, requests int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight, s.most, s.requests
}

// TestWebhookHangingEndpointDoesNotDelayAnotherTenant: on two replicas with two delivery workers
// each, a tenant's endpoint that never answers (within a timeout far longer than the test) has
// older deliveries queued than it has workers; it holds two attempts across the cluster (the
// bound per endpoint), and another tenant's events are delivered, signed, meanwhile.
func TestWebhookHangingEndpointDoesNotDelayAnotherTenant(t *testing.T) {
	t.Parallel()
	stuck := &stuckReceiver{release: make(chan struct{})}
	stuckSrv := httptest.NewServer(stuck)
	t.Cleanup(stuckSrv.Close)
	t.Cleanup(func() { close(stuck.release) }) // first: the hanging requests end
	var mu sync.Mutex
	var secret string
	got := map[string]string{} // webhook-id -> type, of the other tenant's receiver
	bad := 0
	okSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		var p webhookPayload
		if webhook.Verify(secret, r.Header, body, time.Now(), webhook.DefaultTolerance) != nil || json.Unmarshal(body, &p) != nil {
			bad++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		got[p.ID] = p.Type
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(okSrv.Close)
	c := newClusterOn(t, 2, 10*time.Second, "", "DSHD_WEBHOOK_ALLOW_HTTP=1", "DSHD_WEBHOOK_ALLOW_PRIVATE=1",
		"DSHD_WEBHOOK_WORKERS=2", "DSHD_WEBHOOK_TIMEOUT=10m", "DSHD_WEBHOOK_POLL=50ms")
	first, second := c.replicas[0], c.replicas[1]
	ctx := t.Context()
	events := []string{"turn.completed", "session.idle"}

	mustJSON(t, first.call(ctx, "POST", "/v1/webhooks", c.key, map[string]any{"url": stuckSrv.URL, "events": events}), 201, nil)
	for range 3 { // six deliveries to the hanging endpoint, more than the cluster's four workers
		sid := c.sessionCreate(t)
		if _, err := first.postMessage(ctx, c.key, sid, "say:hello", "followup"); err != nil {
			t.Fatal(err)
		}
		first.waitEvents(t, c.key, sid, 60*time.Second, func(evs []storedEvent) bool { return len(turnEnds(evs)) == 1 })
	}
	if err := waitFor(60*time.Second, func() (bool, error) {
		n, _, _ := stuck.state()
		return n == 2, nil
	}); err != nil {
		t.Fatalf("the hanging endpoint never held two attempts: %v", err)
	}

	other := c.otherTenant(t)
	var ep struct{ Secret string }
	mustJSON(t, second.call(ctx, "POST", "/v1/webhooks", other.key, map[string]any{"url": okSrv.URL, "events": events}), 201, &ep)
	mu.Lock()
	secret = ep.Secret
	mu.Unlock()
	if _, err := second.postMessage(ctx, other.key, other.sid, "say:hello", "followup"); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(60*time.Second, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 2, nil
	}); err != nil {
		t.Fatalf("the other tenant's events were not delivered beside the hanging endpoint: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	inFlight, most, requests := stuck.state()
	if bad != 0 || inFlight != 2 || most != 2 || requests != 2 {
		t.Fatalf("%d bad deliveries; the hanging endpoint: %d in flight, at most %d, %d requests (want 2, 2, 2)",
			bad, inFlight, most, requests)
	}
	for id, typ := range got {
		if !strings.HasPrefix(id, other.sid+":") || !slices.Contains(events, typ) {
			t.Fatalf("delivered %s (%s)", id, typ)
		}
	}
}
