package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/pgstore"
)

// TestE6_ToolResultBodyValidation: a posted tool result with a bad body answers 400
// invalid_request (415 for a body that is not JSON), whatever the session's turn waits for.
func TestE6_ToolResultBodyValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionCreate(t, e.keyA)
	path := "/v1/sessions/" + sid.String() + "/tool-results"
	for _, body := range []string{
		`{}`,
		`{"callId":"","content":"x"}`,
		`{"callId":"c1"}`,
		`{"callId":"c1","content":null}`,
		`{"callId":"c1","content":12}`,
		`{"callId":"c1","content":{"type":"text","text":"x"}}`,
		`{"callId":"c1","content":[1]}`,
		`{"callId":"c1","content":["x"]}`,
		`{"callId":"c1","content":[{"type":"text"}]}`,
		`{"callId":"c1","content":[{"type":"text","text":"x","extra":1}]}`,
		`{"callId":"c1","content":[{"type":"text","text":"x","data":"eA=="}]}`,
		`{"callId":"c1","content":[{"type":"tool-call","id":"a","name":"b","arguments":"{}"}]}`,
		`{"callId":"c1","content":[{"type":"image","mediaType":"image/png"}]}`,
		`{"callId":"c1","content":[{"type":"text","text":"a","text":"b"}]}`,
		`{"callId":"c1","content":"x","other":true}`,
		`{"callId":"c1","content":"x","isError":"yes"}`,
		`{"callId":7,"content":"x"}`,
		`{"callId":"c\u0001","content":"x"}`,
		`{"callId":"` + strings.Repeat("c", 257) + `","content":"x"}`,
		`{"callId":"c1","content":"\u0000"}`,
		`{"callId":"c1","content":"x"} {}`,
		`{"callId":"c1","content":`,
		``,
	} {
		p := e.do(t, "POST", path, e.keyA, body).wantProblem(t, http.StatusBadRequest, api.CodeInvalidRequest)
		if p.Detail == "" {
			t.Errorf("%s: no detail", body)
		}
	}
	e.do(t, "POST", path, e.keyA, `{"callId":"c1","content":"x"}`, "Content-Type", "text/plain").
		wantProblem(t, http.StatusUnsupportedMediaType, api.CodeUnsupportedMedia)
	e.do(t, "POST", "/v1/sessions/nope/tool-results", e.keyA, `{"callId":"c1","content":"x"}`).
		wantProblem(t, http.StatusNotFound, api.CodeNotFound)
}

// parkClient appends to sid a turn parked on the client-executed call c1 of tool ask_user (and,
// with approvalID set, on that approval of call c2 too) and returns the turn/parked event.
func (e *env) parkClient(sid uuid.UUID, deadline int64, approvalID string) eventlog.Event {
	e.t.Helper()
	waits := []eventlog.ParkWait{{Kind: eventlog.ParkClient, CallID: "c1", ToolName: "ask_user", DeadlineMs: deadline}}
	evs := []eventlog.NewEvent{turnStart(1), stepStart(1, 1),
		eventlog.Of(eventlog.ToolCall{Turn: 1, Step: 1, CallID: "c1", Name: "ask_user", Arguments: `{"question":"which?"}`})}
	reason := eventlog.ParkClient
	if approvalID != "" {
		reason = eventlog.ParkApproval
		waits = append(waits, eventlog.ParkWait{Kind: eventlog.ParkApproval, CallID: "c2", ToolName: "echo", ApprovalID: approvalID})
		evs = append(evs, eventlog.Of(eventlog.ToolCall{Turn: 1, Step: 1, CallID: "c2", Name: "echo", Arguments: `{"text":"x"}`}),
			eventlog.Of(eventlog.ApprovalAsked{ID: approvalID, ToolName: "echo", CallID: "c2"}))
	}
	evs = append(evs, eventlog.Of(eventlog.TurnParked{Turn: 1, Step: 1, Reason: reason, Waits: waits}))
	out := e.appendEvents(sid, evs...)
	return out[len(out)-1]
}

type statusView struct {
	Status string `json:"status"`
	Turn   *int   `json:"turn"`
}

// statuses reads sid's status three ways: GET of the session, its row in the session list, and
// its turn 1.
func (e *env) statuses(t *testing.T, sid uuid.UUID) (one, listed, turn string) {
	t.Helper()
	var s statusView
	e.do(t, "GET", "/v1/sessions/"+sid.String(), e.keyA, nil).want(t, 200).json(t, &s)
	var l struct {
		Items []struct {
			ID     uuid.UUID `json:"id"`
			Status string    `json:"status"`
		} `json:"items"`
	}
	e.do(t, "GET", "/v1/sessions?limit=100", e.keyA, nil).want(t, 200).json(t, &l)
	for _, it := range l.Items {
		if it.ID == sid {
			listed = it.Status
		}
	}
	var tr statusView
	e.do(t, "GET", "/v1/sessions/"+sid.String()+"/turns/1", e.keyA, nil).want(t, 200).json(t, &tr)
	return s.Status, listed, tr.Status
}

func wantStatuses(t *testing.T, e *env, sid uuid.UUID, session, turn string) {
	t.Helper()
	one, listed, tr := e.statuses(t, sid)
	if one != session || listed != session || tr != turn {
		t.Fatalf("session %s, listed %s, turn %s; want session %s and turn %s", one, listed, tr, session, turn)
	}
}

type pendingCalls struct {
	Turn      *int   `json:"turn"`
	ParkedSeq *int64 `json:"parkedSeq"`
	Items     []struct {
		CallID     string         `json:"callId"`
		ToolName   string         `json:"toolName"`
		Arguments  map[string]any `json:"arguments"`
		DeadlineMs int64          `json:"deadlineMs"`
	} `json:"items"`
}

// TestE6_ParkedTurnStatus: a turn parked on a client-executed call reads waiting-client (session,
// session list, turn resource) though no replica holds its lease, and GET tool-results lists the
// call with its arguments; once the call has its result nothing is left to wait for and the turn
// is queued for a replica to resume it. A turn parked on an approval reads waiting-approval until
// the approval is decided.
func TestE6_ParkedTurnStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionCreate(t, e.keyA)
	deadline := time.Now().Add(time.Hour).UnixMilli()
	parked := e.parkClient(sid, deadline, "")
	wantStatuses(t, e, sid, api.StatusWaitingClient, api.StatusWaitingClient)

	var pc pendingCalls
	e.do(t, "GET", "/v1/sessions/"+sid.String()+"/tool-results", e.keyA, nil).want(t, 200).json(t, &pc)
	if pc.Turn == nil || *pc.Turn != 1 || pc.ParkedSeq == nil || *pc.ParkedSeq != parked.Seq || len(pc.Items) != 1 {
		t.Fatalf("pending calls %+v, want c1 of turn 1 parked at %d", pc, parked.Seq)
	}
	if it := pc.Items[0]; it.CallID != "c1" || it.ToolName != "ask_user" || it.Arguments["question"] != "which?" || it.DeadlineMs != deadline {
		t.Fatalf("pending call %+v", it)
	}
	e.do(t, "GET", "/v1/sessions/"+sid.String()+"/tool-results", e.keyB, nil).wantProblem(t, 404, api.CodeNotFound)

	e.appendEvents(sid, eventlog.Of(eventlog.ClientResult{CallID: "c1", Content: nil, IsError: true}))
	wantStatuses(t, e, sid, api.StatusQueued, api.TurnQueued)
	pc = pendingCalls{}
	e.do(t, "GET", "/v1/sessions/"+sid.String()+"/tool-results", e.keyA, nil).want(t, 200).json(t, &pc)
	if len(pc.Items) != 0 || pc.Turn == nil {
		t.Fatalf("pending calls %+v after the result, want none of parked turn 1", pc)
	}

	// Parked on an approval and a client call: the approval decides the status first.
	ap := e.sessionCreate(t, e.keyA)
	e.parkClient(ap, 0, "ap1")
	wantStatuses(t, e, ap, api.StatusWaitingApproval, api.StatusWaitingApproval)
	e.appendEvents(ap, eventlog.Of(eventlog.ApprovalDecided{ID: "ap1", Outcome: eventlog.ApprovalAllowedOnce}))
	wantStatuses(t, e, ap, api.StatusWaitingClient, api.StatusWaitingClient)
	e.appendEvents(ap, eventlog.Of(eventlog.AgentCancel{Reason: eventlog.Cause{Kind: "user"}}))
	wantStatuses(t, e, ap, api.StatusQueued, api.TurnQueued)

	// A handover waits for nothing; an idle session without a turn has no pending calls.
	ho := e.sessionCreate(t, e.keyA)
	e.appendEvents(ho, turnStart(1), stepStart(1, 1), stepEnd(1, 1),
		eventlog.Of(eventlog.TurnParked{Turn: 1, Step: 1, Reason: eventlog.ParkHandover}))
	wantStatuses(t, e, ho, api.StatusQueued, api.TurnQueued)
	idle := e.sessionCreate(t, e.keyA)
	pc = pendingCalls{}
	e.do(t, "GET", "/v1/sessions/"+idle.String()+"/tool-results", e.keyA, nil).want(t, 200).json(t, &pc)
	if len(pc.Items) != 0 || pc.Turn != nil || pc.ParkedSeq != nil {
		t.Fatalf("pending calls of an idle session %+v", pc)
	}
}

// clientResults stands in for the worker's PostToolResult until the post path has it: it appends
// the tool/client-result of an open client wait of the session's parked turn (not_found for any
// other call, conflict once the call has a result) and wakes nothing.
type clientResults struct {
	api.Turns
	log *pgstore.Store
}

func (c clientResults) PostToolResult(ctx context.Context, tenantID, sessionID uuid.UUID, r eventlog.ClientResult) (eventlog.Event, error) {
	states, err := c.log.SessionStates(ctx, tenantID, []uuid.UUID{sessionID})
	if err != nil {
		return eventlog.Event{}, err
	}
	p := states[sessionID].Park
	if p == nil {
		return eventlog.Event{}, fault.New(fault.NotFound, "no client-executed call %s waits for a result in this session", r.CallID)
	}
	if _, done := p.Results[r.CallID]; done {
		return eventlog.Event{}, fault.New(fault.Conflict, "call %s already has a result", r.CallID)
	}
	for _, w := range p.Open() {
		if w.Kind == eventlog.ParkClient && w.CallID == r.CallID {
			out, err := c.log.Journal(nil, tenantID, sessionID, uuid.Nil).Append(ctx, eventlog.Batch(eventlog.Of(r)))
			if err != nil {
				return eventlog.Event{}, err
			}
			return out[0], nil
		}
	}
	return eventlog.Event{}, fault.New(fault.NotFound, "no client-executed call %s waits for a result in this session", r.CallID)
}

func init() { contractExtras = append(contractExtras, toolResultsContract) }

// toolResultsContract exercises GET and POST /v1/sessions/{id}/tool-results on a parked turn of a
// new session, through a replica whose turns service posts tool results (the worker's, or
// clientResults while the worker has none).
func toolResultsContract(t *testing.T, e *env, c *contract, _, _ string) {
	r := e.newReplica(func(cfg *api.Config) {
		if _, ok := cfg.Turns.(interface {
			PostToolResult(context.Context, uuid.UUID, uuid.UUID, eventlog.ClientResult) (eventlog.Event, error)
		}); !ok {
			cfg.Turns = clientResults{Turns: cfg.Turns, log: e.log}
		}
	})
	sid := r.sessionCreate(t, e.keyA)
	e.parkClient(sid, 0, "")
	path := "/v1/sessions/" + sid.String() + "/tool-results"
	c.check("GET", "/v1/sessions/{id}/tool-results", r.do(t, "GET", path, e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/sessions/{id}/tool-results", r.do(t, "GET", path, e.keyB, nil).want(t, 404))
	c.check("GET", "/v1/sessions/{id}", r.do(t, "GET", "/v1/sessions/"+sid.String(), e.keyA, nil).want(t, 200))
	c.check("GET", "/v1/sessions/{id}/turns/{n}", r.do(t, "GET", "/v1/sessions/"+sid.String()+"/turns/1", e.keyA, nil).want(t, 200))
	c.check("POST", "/v1/sessions/{id}/tool-results", r.do(t, "POST", path, e.keyA, `{"callId":""}`).want(t, 400))
	c.check("POST", "/v1/sessions/{id}/tool-results", r.do(t, "POST", path, e.keyA, `{"callId":"c9","content":"x"}`).want(t, 404))
	var posted struct {
		CallID string `json:"callId"`
		Seq    int64  `json:"seq"`
	}
	c.check("POST", "/v1/sessions/{id}/tool-results", r.do(t, "POST", path, e.keyA,
		`{"callId":"c1","content":[{"type":"text","text":"the second"}]}`).want(t, 200)).json(t, &posted)
	if posted.CallID != "c1" || posted.Seq <= 0 {
		t.Fatalf("posted %+v", posted)
	}
	c.check("POST", "/v1/sessions/{id}/tool-results", r.do(t, "POST", path, e.keyA, `{"callId":"c1","content":"again"}`).want(t, 409))
	evs, err := e.log.EventList(context.Background(), e.tenantA, sid, pgstore.ListQuery{After: posted.Seq - 1, Limit: 1})
	if err != nil || len(evs) != 1 {
		t.Fatalf("events %v, %v", evs, err)
	}
	got, err := eventlog.Decode[eventlog.ClientResult](evs[0])
	if err != nil || got.CallID != "c1" || len(got.Content) != 1 || got.Content[0].Text != "the second" || got.IsError {
		t.Fatalf("tool/client-result %+v (%v)", got, err)
	}
}
