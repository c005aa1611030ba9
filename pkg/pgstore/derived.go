package pgstore

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
)

// What an append keeps beside the events, in its own statement (migration 00010): the stored
// bytes of the log, the usage of the turns the batch touches, and the webhook deliveries the batch
// causes. Each is computed here from the stamped batch and handed to the statement as one
// parameter, so the statement stays one round trip and adds nothing when the batch carries none.

// batchBytes is the stored size of a batch: its data and surface ops.
func batchBytes(batch []eventlog.Event) int64 {
	var n int64
	for _, ev := range batch {
		n += int64(len(ev.Data))
		if ev.SurfaceOp != nil {
			b, _ := ev.SurfaceOp.MarshalJSON()
			n += int64(len(b))
		}
	}
	return n
}

// usageRow is one turn's usage delta, a row of the append statement's usage recordset (the
// column names of usage_turns).
type usageRow struct {
	Turn            int     `json:"turn"`
	Day             string  `json:"day"` // the UTC day of the turn's start, or of the batch
	StartedAt       *string `json:"started_at"`
	EndedAt         *string `json:"ended_at"`
	EndKind         *string `json:"end_kind"`
	InputTokens     int64   `json:"input_tokens"`
	OutputTokens    int64   `json:"output_tokens"`
	CacheReadTokens int64   `json:"cache_read_tokens"`
	CacheMissTokens int64   `json:"cache_miss_tokens"`
	ReasoningTokens int64   `json:"reasoning_tokens"`
	ModelCalls      int64   `json:"model_calls"`
	ToolCalls       int64   `json:"tool_calls"`
	ToolErrors      int64   `json:"tool_errors"`
	ModelErrors     int64   `json:"model_errors"`
}

func rfc3339ms(ms int64) *string {
	s := time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
	return &s
}

// usageRows returns the usage deltas of a stamped batch as JSON, or nil when it has none.
func usageRows(batch []eventlog.Event) []byte {
	turns := eventlog.UsageByTurn(batch)
	if len(turns) == 0 {
		return nil
	}
	day := time.UnixMilli(batch[0].Time).UTC().Format(time.DateOnly)
	rows := make([]usageRow, 0, len(turns))
	for _, t := range turns {
		u := t.Usage
		r := usageRow{Turn: t.Turn, Day: day, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
			CacheReadTokens: u.CacheReadTokens, CacheMissTokens: u.CacheMissTokens, ReasoningTokens: u.ReasoningTokens,
			ModelCalls: u.ModelCalls, ToolCalls: u.ToolCalls, ToolErrors: u.ToolErrors, ModelErrors: u.ModelErrors}
		if t.StartMs != 0 {
			r.StartedAt = rfc3339ms(t.StartMs)
			r.Day = time.UnixMilli(t.StartMs).UTC().Format(time.DateOnly)
		}
		if t.EndMs != 0 {
			r.EndedAt, r.EndKind = rfc3339ms(t.EndMs), &t.EndKind
		}
		rows = append(rows, r)
	}
	b, _ := json.Marshal(rows)
	return b
}

// Webhook event types (docs/webhooks.md).
const (
	WebhookTurnCompleted     = "turn.completed"
	WebhookTurnFailed        = "turn.failed"
	WebhookApprovalRequested = "approval.requested"
	WebhookSessionIdle       = "session.idle"
)

// WebhookEventTypes are the event types an endpoint may subscribe to.
var WebhookEventTypes = []string{WebhookTurnCompleted, WebhookTurnFailed, WebhookApprovalRequested, WebhookSessionIdle}

// hookRow is one webhook event a batch causes, a row of the append statement's outbox
// recordset: its id (the same for every endpoint and attempt), type and body.
type hookRow struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

// WebhookEvent is the body of a webhook delivery.
type WebhookEvent struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	CreatedAt time.Time       `json:"createdAt"`
	Data      json.RawMessage `json:"data"`
}

// hookRows returns the webhook events of a stamped batch as JSON, or nil when it causes none:
// turn.completed or turn.failed (a turn whose eventlog.TurnOutcome failed: it ended with an error
// or was interrupted) for each
// turn/end, approval.requested for each approval/asked, and, when release is set, session.idle
// (the statement keeps it only when the append did release the lease with nothing waiting).
func hookRows(sessionID uuid.UUID, batch []eventlog.Event, release bool) []byte {
	var rows []hookRow
	add := func(ev eventlog.Event, typ string, data any) {
		id := sessionID.String() + ":" + strconv.FormatInt(ev.Seq, 10) + ":" + typ
		d, _ := json.Marshal(data)
		body, _ := json.Marshal(WebhookEvent{ID: id, Type: typ, CreatedAt: time.UnixMilli(ev.Time).UTC(), Data: d})
		rows = append(rows, hookRow{ID: id, Type: typ, Payload: body})
	}
	for _, ev := range batch {
		switch ev.Type {
		case eventlog.TypeTurnEnd:
			end, err := eventlog.Decode[eventlog.TurnEnd](ev)
			if err != nil {
				continue
			}
			typ := WebhookTurnCompleted
			if eventlog.TurnOutcome(end.Reason).Failed() {
				typ = WebhookTurnFailed
			}
			add(ev, typ, struct {
				SessionID uuid.UUID           `json:"sessionId"`
				Turn      int                 `json:"turn"`
				Seq       int64               `json:"seq"`
				Reason    eventlog.TurnReason `json:"reason"`
			}{sessionID, end.Turn, ev.Seq, end.Reason})
		case eventlog.TypeApprovalAsked:
			a, err := eventlog.Decode[eventlog.ApprovalAsked](ev)
			if err != nil {
				continue
			}
			add(ev, WebhookApprovalRequested, struct {
				SessionID  uuid.UUID `json:"sessionId"`
				Seq        int64     `json:"seq"`
				ApprovalID string    `json:"approvalId"`
				ToolName   string    `json:"toolName"`
				CallID     string    `json:"callId,omitempty"`
				Reason     string    `json:"reason,omitempty"`
			}{sessionID, ev.Seq, a.ID, a.ToolName, a.CallID, a.Reason})
		}
	}
	if release && len(batch) > 0 {
		last := batch[len(batch)-1]
		add(last, WebhookSessionIdle, struct {
			SessionID uuid.UUID `json:"sessionId"`
			Seq       int64     `json:"seq"`
		}{sessionID, last.Seq})
	}
	if len(rows) == 0 {
		return nil
	}
	b, _ := json.Marshal(rows)
	return b
}
