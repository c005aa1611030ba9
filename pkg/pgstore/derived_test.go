package pgstore_test

import (
	"context"
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/pgstore"
)

// storedUsage reads the usage rows of a session, by turn.
func storedUsage(t *testing.T, pool *pgxpool.Pool, session uuid.UUID) map[int]eventlog.Usage {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT turn, input_tokens, output_tokens, cache_read_tokens,
		cache_miss_tokens, reasoning_tokens, model_calls, tool_calls, tool_errors, model_errors
		FROM usage_turns WHERE session_id = $1`, session)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int]eventlog.Usage{}
	for rows.Next() {
		var turn int
		var u eventlog.Usage
		if err := rows.Scan(&turn, &u.InputTokens, &u.OutputTokens, &u.CacheReadTokens, &u.CacheMissTokens,
			&u.ReasoningTokens, &u.ModelCalls, &u.ToolCalls, &u.ToolErrors, &u.ModelErrors); err != nil {
			t.Fatal(err)
		}
		out[turn] = u
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestUsageAndBytesFollowTheLog: the usage rows and the stored bytes the append statement keeps
// equal what the log folds to, over turns spread across several batches, a retry, a failed tool
// result, a repair's turn/end, and a fork's copied prefix.
func TestUsageAndBytesFollowTheLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tenant := newStore(t, pgstore.StoreConfig{})
	sess := newSession(t, st, tenant)
	assistant := func(id string) llm.Message {
		return llm.Message{ID: id, Role: "assistant", Content: []llm.Block{{Type: "text", Text: "ok"}},
			Source: llm.Source{Kind: "model", Provider: "scripted", Model: "m"}}
	}
	ev := func(typ string, data any) eventlog.NewEvent {
		e := eventlog.NewEvent{Type: typ, Data: data}
		if typ == "assistant/message" || typ == "tool/result" {
			e.SurfaceOp = eventlog.Append
		}
		return e
	}
	usage := &llm.Usage{InputTokens: 100, OutputTokens: 7, CacheReadTokens: 60, CacheMissTokens: 40, ReasoningTokens: 3}
	batches := [][]eventlog.NewEvent{
		{ev("turn/start", map[string]int{"turn": 1}), ev("step/start", map[string]int{"turn": 1, "step": 1})},
		{ev("llm/retry", eventlog.LLMRetry{Turn: 1, Step: 1, Attempt: 1, DelayMs: 10, Code: llm.CodeServer, Message: "scripted failure"})},
		{ev("assistant/message", eventlog.AssistantMessage{Turn: 1, Step: 1, Message: assistant("a1"), Usage: usage}),
			ev("tool/call", eventlog.ToolCall{Turn: 1, Step: 1, CallID: "c1", Name: "echo", Arguments: "{}"})},
		{ev("tool/result", eventlog.ToolResult{Turn: 1, Step: 1,
			Message: llm.NewToolResultMessage("r1", "c1", []llm.Block{{Type: "text", Text: "no"}}, true)}),
			ev("step/end", map[string]int{"turn": 1, "step": 1}),
			ev("turn/end", map[string]any{"turn": 1, "reason": map[string]string{"kind": "completed"}})},
		{ev("turn/start", map[string]int{"turn": 2}), ev("step/start", map[string]int{"turn": 2, "step": 1}),
			ev("assistant/message", eventlog.AssistantMessage{Turn: 2, Step: 1, Message: assistant("a2"), Usage: usage})},
	}
	for i, b := range batches {
		if _, err := appendEvents(st, ctx, tenant, sess.ID, b...); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	if _, err := repair(st, ctx, tenant, sess.ID); err != nil { // closes turn 2
		t.Fatal(err)
	}
	all, err := st.Journal(nil, tenant, sess.ID, uuid.Nil).Since(ctx, -1)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]eventlog.Usage{}
	for _, tu := range eventlog.UsageByTurn(all) {
		want[tu.Turn] = tu.Usage
	}
	got := storedUsage(t, pool, sess.ID)
	if len(got) != 2 || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("stored usage %+v, the log folds to %+v", got, want)
	}
	if u := got[1]; u.ModelCalls != 2 || u.ModelErrors != 1 || u.ToolCalls != 1 || u.ToolErrors != 1 || u.InputTokens != 100 {
		t.Fatalf("turn 1 usage %+v", u)
	}
	var ended int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM usage_turns WHERE session_id = $1 AND ended_at IS NOT NULL
		AND started_at IS NOT NULL AND day = (started_at AT TIME ZONE 'UTC')::date`, sess.ID).Scan(&ended); err != nil || ended != 2 {
		t.Fatalf("turns with start, end and day: %d, %v", ended, err)
	}

	logBytes := func(id uuid.UUID) (stored, counted int64) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT c.log_bytes, (SELECT coalesce(sum(octet_length(data::text)
			+ coalesce(octet_length(surface_op::text), 0)), 0) FROM events WHERE session_id = $1)
			FROM session_counters c WHERE c.session_id = $1`, id).Scan(&stored, &counted); err != nil {
			t.Fatal(err)
		}
		return stored, counted
	}
	if stored, counted := logBytes(sess.ID); stored != counted || stored == 0 {
		t.Fatalf("log_bytes %d, the events hold %d", stored, counted)
	}
	child, err := st.Fork(ctx, tenant, sess.ID, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if stored, counted := logBytes(child.ID); stored != counted || stored == 0 {
		t.Fatalf("fork: log_bytes %d, the events hold %d", stored, counted)
	}
	if got := storedUsage(t, pool, child.ID); len(got) != 0 {
		t.Fatalf("a fork's copied turns cost nothing again: %+v", got)
	}
}

// TestWebhookOutboxFollowsTheLog: an append that ends a turn or asks an approval inserts one
// delivery per subscribed endpoint, in its own statement; session.idle comes with the append
// that releases the lease (or with the release), once; another tenant's endpoints get nothing.
func TestWebhookOutboxFollowsTheLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool, tenant := newStore(t, pgstore.StoreConfig{})
	other := newTenant(t, pool)
	endpoint := func(tenant uuid.UUID, events ...string) uuid.UUID {
		id := uuid.New()
		if _, err := pool.Exec(ctx, `INSERT INTO webhook_endpoints (id, tenant_id, url, events, secret)
			VALUES ($1, $2, 'https://example.com/h', $3, '\x00')`, id, tenant, events); err != nil {
			t.Fatal(err)
		}
		return id
	}
	all := endpoint(tenant, pgstore.WebhookEventTypes...)
	turns := endpoint(tenant, pgstore.WebhookTurnCompleted)
	endpoint(other, pgstore.WebhookEventTypes...) // sees nothing: every delivery is checked below
	sess := newSession(t, st, tenant)
	owner := uuid.New()
	if ok, _, err := st.LeaseAcquire(ctx, tenant, sess.ID, owner, time.Minute); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	j := st.Journal(nil, tenant, sess.ID, owner)
	j.ReleaseAtTurnEnd(true)
	batches := [][]eventlog.NewEvent{
		{turnStartEv(1), {Type: "approval/asked", Data: eventlog.ApprovalAsked{ID: "ap1", ToolName: "bash", CallID: "c1"}}},
		{{Type: "approval/decided", Data: eventlog.ApprovalDecided{ID: "ap1", Outcome: "rejected"}}},
		{{Type: "turn/end", Data: map[string]any{"turn": 1, "reason": map[string]string{"kind": "completed"}}}},
	}
	for i, b := range batches {
		if _, err := j.Append(ctx, eventlog.Batch(b...)); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	if !j.Released() {
		t.Fatal("the turn's last append did not release the lease")
	}
	type delivery struct {
		endpoint uuid.UUID
		typ      string
	}
	read := func() map[delivery]int {
		rows, err := pool.Query(ctx, `SELECT endpoint_id, event_type, payload::text FROM webhook_deliveries`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[delivery]int{}
		for rows.Next() {
			var d delivery
			var body string
			if err := rows.Scan(&d.endpoint, &d.typ, &body); err != nil {
				t.Fatal(err)
			}
			var ev pgstore.WebhookEvent
			if err := json.Unmarshal([]byte(body), &ev); err != nil || ev.Type != d.typ || ev.ID == "" || len(ev.Data) == 0 {
				t.Fatalf("payload %s: %v", body, err)
			}
			out[d]++
		}
		return out
	}
	want := map[delivery]int{{all, pgstore.WebhookApprovalRequested}: 1, {all, pgstore.WebhookTurnCompleted}: 1,
		{all, pgstore.WebhookSessionIdle}: 1, {turns, pgstore.WebhookTurnCompleted}: 1}
	if got := read(); !maps.Equal(got, want) {
		t.Fatalf("deliveries %v, want %v", got, want)
	}
	// A lease released by LeaseRelease (a serve that ended without a turn/end) is idle too.
	if ok, _, err := st.LeaseAcquire(ctx, tenant, sess.ID, owner, time.Minute); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	if _, err := appendEvents(st, ctx, tenant, sess.ID, eventlog.NewEvent{Type: "approval/policy", Data: eventlog.ApprovalPolicy{Policy: "never"}}); err != nil {
		t.Fatal(err)
	}
	if released, err := st.LeaseRelease(ctx, tenant, sess.ID, owner); err != nil || !released {
		t.Fatalf("release: %v %v", released, err)
	}
	want[delivery{all, pgstore.WebhookSessionIdle}] = 2
	if got := read(); !maps.Equal(got, want) {
		t.Fatalf("deliveries after a release %v, want %v", got, want)
	}
}

func turnStartEv(n int) eventlog.NewEvent {
	return eventlog.NewEvent{Type: "turn/start", Data: map[string]int{"turn": n}}
}
