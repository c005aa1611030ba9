package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/worker"
)

// The turn as a resource: GET /v1/sessions/{id}/turns and /turns/{n}, and the status of a
// session, are derived from the log on every read (nothing is stored besides the log): the turn
// boundaries, steps, messages, tool calls and results, retries and approvals of the session,
// read with a type filter, folded turn by turn; the state of a running turn comes from the lease
// on the session's head and the approvals that wait in it, that of a parked turn (E6), which holds
// no lease, from its last turn/parked and the answers after it (pgstore SessionState.Park).

// Session statuses.
const (
	StatusIdle            = "idle"             // nothing runs and nothing waits
	StatusQueued          = "queued"           // a followup waits for a replica, or a dead replica's turn waits for repair
	StatusRunning         = "running"          // a replica holds the session's lease
	StatusWaitingApproval = "waiting-approval" // a tool call waits for a person's answer: the turn runs, or is parked on it
	StatusWaitingClient   = "waiting-client"   // the turn is parked on the result of a client-executed tool
)

// Turn statuses besides running, waiting-approval and waiting-client: how the turn ended
// (eventlog.TurnOutcome, the one outcome rule); stalled: open in the log while no replica holds
// the lease (crash repair will end it interrupted); queued: parked with nothing left to wait for
// (every wait answered, cancelled, or handed over by a draining replica) until a replica resumes
// it.
const (
	TurnCompleted   = string(eventlog.OutcomeCompleted)
	TurnCancelled   = string(eventlog.OutcomeCancelled)
	TurnAborted     = string(eventlog.OutcomeAborted)
	TurnFailed      = string(eventlog.OutcomeFailed)
	TurnMaxTokens   = string(eventlog.OutcomeMaxTokens)
	TurnInterrupted = string(eventlog.OutcomeInterrupted)
	TurnBlocked     = string(eventlog.OutcomeBlocked)
	TurnStalled     = "stalled"
	TurnQueued      = StatusQueued
)

// usageJSON counts what turns cost, as eventlog.Usage defines it (the usage tables and
// GET /v1/usage count the same).
type usageJSON = eventlog.Usage

// turnJSON is a turn as the API shows it: an eventlog.TurnSummary with its live state.
type turnJSON struct {
	Turn   int    `json:"turn"`
	Status string `json:"status"`
	// Failed is the outcome's Failed: the turn ended on an error or was interrupted (the turns
	// a turn.failed webhook reports); false while open.
	Failed bool `json:"failed"`
	// EndReason is turn/end's reason, null while the turn is open.
	EndReason json.RawMessage `json:"endReason"`
	FirstSeq  int64           `json:"firstSeq"` // the turn/start
	LastSeq   int64           `json:"lastSeq"`  // the turn/end, or the log's last event while open
	StartedAt time.Time       `json:"startedAt"`
	EndedAt   *time.Time      `json:"endedAt"`
	// DurationMs is from turn/start to turn/end, or to now while the turn is open.
	DurationMs int64 `json:"durationMs"`
	Steps      int   `json:"steps"`
	// MessageIDs are the posted (source kind user) messages the turn entered, in order.
	MessageIDs       []string  `json:"messageIds"`
	PendingApprovals int       `json:"pendingApprovals"`
	Usage            usageJSON `json:"usage"`
	// TraceIDs are the turn's traces (docs/observability.md), one per loop instance that ran it.
	TraceIDs []string `json:"traceIds"`

	open bool
	park *eventlog.Park // the turn's park while it is the log's last turn and parked (settle)
}

func msTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// turnOut is the API's view of a folded turn. An open turn is stalled until settle.
func turnOut(t eventlog.TurnSummary) *turnJSON {
	out := &turnJSON{Turn: t.Turn, Status: TurnStalled, EndReason: json.RawMessage("null"), FirstSeq: t.FirstSeq,
		LastSeq: t.LastSeq, StartedAt: msTime(t.StartMs), Steps: t.Steps, MessageIDs: t.MessageIDs,
		PendingApprovals: len(t.Pending), Usage: t.Usage, TraceIDs: t.TraceIDs, open: t.Open}
	if out.TraceIDs == nil {
		out.TraceIDs = []string{}
	}
	if !t.Open {
		end := msTime(t.EndMs)
		out.Status, out.Failed, out.EndReason, out.EndedAt = string(t.Outcome), t.Outcome.Failed(), t.Reason, &end
		out.DurationMs, out.PendingApprovals = t.EndMs-t.StartMs, 0
	}
	return out
}

// settle gives the open turns their state: the state of its park when the log's last turn is
// parked (park, of that turn, non-nil), else running or waiting-approval while a replica holds the session's
// lease (only the log's last turn can be open then), stalled otherwise.
func settle(turns []*turnJSON, h eventlog.Head, park *eventlog.Park, now time.Time) {
	for i, t := range turns {
		if !t.open {
			continue
		}
		t.DurationMs = max(0, now.UnixMilli()-t.StartedAt.UnixMilli())
		switch last := i == len(turns)-1; {
		case last && park != nil && park.Turn == t.Turn:
			t.Status, t.park = parkStatus(*park, h, now), park
		case last && h.Lease.HeldAt(now):
			t.Status = StatusRunning
			if t.PendingApprovals > 0 {
				t.Status = StatusWaitingApproval
			}
		}
	}
}

// parkStatus is the status of a parked turn: waiting-approval while an approval it waits for is
// unanswered, else waiting-client while a client-executed call's result is missing; once nothing
// is left to wait for (or a cancel came), running when a replica holds the lease to resume it,
// queued until one does.
func parkStatus(p eventlog.Park, h eventlog.Head, now time.Time) string {
	if p.Cancel == nil {
		open := p.Open()
		if slices.ContainsFunc(open, func(w eventlog.ParkWait) bool { return w.Kind == eventlog.ParkApproval }) {
			return StatusWaitingApproval
		}
		if len(open) > 0 {
			return StatusWaitingClient
		}
	}
	if h.Lease.HeldAt(now) {
		return StatusRunning
	}
	return StatusQueued
}

// sessionStatus is a session's status and the number of its running turn (nil unless one runs, is
// parked, or is about to start under the lease). park is the open turn's park, nil unless the
// last turn is parked.
func sessionStatus(h eventlog.Head, lastTurn int, open bool, pending int, park *eventlog.Park, now time.Time) (string, *int) {
	if open && park != nil {
		st := parkStatus(*park, h, now)
		if st == StatusQueued {
			return st, nil
		}
		return st, &lastTurn
	}
	if h.Lease.HeldAt(now) {
		var n *int
		switch {
		case open:
			n = &lastTurn
		case h.Inbox.NextTurn > 0:
			next := lastTurn + 1
			n = &next
		}
		if open && pending > 0 {
			return StatusWaitingApproval, n
		}
		return StatusRunning, n
	}
	if h.Inbox.NextTurn > 0 || open {
		return StatusQueued, nil
	}
	return StatusIdle, nil
}

// events reads the session's events of types with after < seq < until (until < 0: no bound),
// every page of them.
func (rs sessionResource) events(ctx context.Context, tenant, id uuid.UUID, after, until int64, types []string) ([]eventlog.Event, error) {
	var out []eventlog.Event
	for {
		page, err := rs.s.cfg.Log.EventList(ctx, tenant, id, pgstore.ListQuery{After: after, Limit: pgstore.MaxEventPage, Types: types})
		if err != nil {
			return nil, err
		}
		for _, ev := range page {
			if until >= 0 && ev.Seq >= until {
				return out, nil
			}
			out = append(out, ev)
		}
		if len(page) < pgstore.MaxEventPage {
			return out, nil
		}
		after = page[len(page)-1].Seq
	}
}

// turnRange returns the turns numbered from first on, at most limit of them (limit < 0: all), and
// whether later turns exist.
func (rs sessionResource) turnRange(ctx context.Context, tenant, id uuid.UUID, h eventlog.Head, first, limit int) ([]*turnJSON, bool, error) {
	starts, err := rs.events(ctx, tenant, id, -1, -1, []string{eventlog.TypeTurnStart})
	if err != nil {
		return nil, false, err
	}
	i := slices.IndexFunc(starts, func(ev eventlog.Event) bool {
		n, ok := eventlog.TurnNumber(ev)
		return ok && n >= first
	})
	if i < 0 {
		return nil, false, nil
	}
	until, more := int64(-1), false
	if limit >= 0 && i+limit < len(starts) {
		until, more = starts[i+limit].Seq, true
	}
	evs, err := rs.events(ctx, tenant, id, starts[i].Seq-1, until, eventlog.TurnKinds())
	if err != nil {
		return nil, false, err
	}
	folded := eventlog.FoldTurns(evs, h.Last())
	turns := make([]*turnJSON, len(folded))
	for i, t := range folded {
		turns[i] = turnOut(t)
	}
	var park *eventlog.Park
	if len(turns) > 0 && turns[len(turns)-1].open {
		if park, err = rs.park(ctx, tenant, id); err != nil {
			return nil, false, err
		}
	}
	settle(turns, h, park, time.Now())
	return turns, more, nil
}

// park returns the park of the session's open turn, nil unless that turn is parked.
func (rs sessionResource) park(ctx context.Context, tenant, id uuid.UUID) (*eventlog.Park, error) {
	states, err := rs.s.cfg.Log.SessionStates(ctx, tenant, []uuid.UUID{id})
	if err != nil {
		return nil, err
	}
	st, ok := states[id]
	if !ok {
		return nil, pgstore.ErrNotFound
	}
	return st.Park, nil
}

// handleTurnList answers {items, nextCursor}: the session's turns, oldest first; the cursor is
// the number of the last turn of the previous page.
func (rs sessionResource) handleTurnList(w http.ResponseWriter, r *http.Request) {
	id, err := rs.sessionID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	limit, err := pageLimit(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	first := 1
	if c := r.URL.Query().Get("cursor"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 0 {
			writeError(w, r, fieldError(queryPointer("cursor"), "invalid cursor"))
			return
		}
		first = n + 1
	}
	h, err := rs.s.cfg.Log.SessionHead(r.Context(), tenantID(r), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	turns, more, err := rs.turnRange(r.Context(), tenantID(r), id, h, first, limit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := page[*turnJSON]{Items: turns}
	if out.Items == nil {
		out.Items = []*turnJSON{}
	}
	if more {
		out.NextCursor = strconv.Itoa(turns[len(turns)-1].Turn)
	}
	writeJSON(w, http.StatusOK, out)
}

// handleTurnGet answers turn {n} of the session, 404 when it has not started.
func (rs sessionResource) handleTurnGet(w http.ResponseWriter, r *http.Request) {
	id, err := rs.sessionID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	n, err := strconv.Atoi(chi.URLParam(r, "n"))
	if err != nil || n < 1 {
		writeProblem(w, CodeNotFound, "turn not found: turns are numbered from 1")
		return
	}
	h, err := rs.s.cfg.Log.SessionHead(r.Context(), tenantID(r), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	turns, _, err := rs.turnRange(r.Context(), tenantID(r), id, h, n, 1)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if len(turns) == 0 || turns[0].Turn != n {
		writeProblem(w, CodeNotFound, "turn not found: the session has not started turn "+strconv.Itoa(n))
		return
	}
	writeJSON(w, http.StatusOK, turns[0])
}

// sessionDetail adds the status, the running turn and the usage totals of all turns to a
// session read for GET /v1/sessions/{id}.
func (rs sessionResource) sessionDetail(ctx context.Context, tenant uuid.UUID, sess eventlog.Session) (sessionJSON, error) {
	out := sessionOut(sess)
	h, err := rs.s.cfg.Log.SessionHead(ctx, tenant, sess.ID)
	if err != nil {
		return out, err
	}
	turns, _, err := rs.turnRange(ctx, tenant, sess.ID, h, 1, -1)
	if err != nil {
		return out, err
	}
	var (
		total    usageJSON
		park     *eventlog.Park
		lastTurn int
		open     bool
		pending  int
	)
	for _, t := range turns {
		total.Add(t.Usage)
	}
	if len(turns) > 0 {
		last := turns[len(turns)-1]
		lastTurn, open, pending, park = last.Turn, last.open, last.PendingApprovals, last.park
	}
	out.Status, out.Turn = sessionStatus(h, lastTurn, open, pending, park, time.Now())
	out.LastTurn, out.Usage = &lastTurn, &total
	return out, nil
}

// withStates adds the status, the running turn and the last turn's number to a page of sessions,
// with one query for all of them.
func (rs sessionResource) withStates(ctx context.Context, tenant uuid.UUID, items []sessionJSON) error {
	ids := make([]uuid.UUID, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	states, err := rs.s.cfg.Log.SessionStates(ctx, tenant, ids)
	if err != nil {
		return err
	}
	now := time.Now()
	for i := range items {
		st, ok := states[items[i].ID]
		if !ok {
			continue // deleted meanwhile
		}
		items[i].Status, items[i].Turn = sessionStatus(st.Head, st.LastTurn, st.TurnOpen, st.PendingApprovals, st.Park, now)
		n := st.LastTurn
		items[i].LastTurn = &n
	}
	return nil
}

// messageAccepted is the 202 answer to a posted message: its id and splice seq, the stream URL
// that follows the session from the splice on, and, when it can be told, the number of the turn
// that will serve it: for a followup, one more than the turns started before the post plus the
// followups ahead of it (each turn serves one); for a steer, the open turn (its next step), or the
// next one. An inject wakes nothing, so no turn is named. A cancel that clears the inbox first
// means no turn serves the message.
func (rs sessionResource) messageAccepted(r *http.Request, id uuid.UUID, mode string, p worker.Posted) messageResponse {
	out := messageResponse{MessageID: p.MessageID, Seq: p.Seq,
		StreamURL: fmt.Sprintf("/v1/sessions/%s/events?after=%d", id, p.Seq-1)}
	if mode == worker.ModeInject {
		return out
	}
	ctx, tenant := r.Context(), tenantID(r)
	turn, open, err := rs.s.cfg.Log.TurnBefore(ctx, tenant, id, p.Seq)
	if err != nil {
		logger(r).Warn("the turn serving a message is unknown", slog.String("error", err.Error()))
		return out
	}
	n := turn + 1
	switch mode {
	case worker.ModeSteer:
		if open {
			n = turn
		}
	default:
		evs, err := rs.s.cfg.Log.EventList(ctx, tenant, id, pgstore.ListQuery{After: p.Seq - 1, Limit: 1})
		if err != nil || len(evs) == 0 {
			return out
		}
		sp, ok := eventlog.SpliceSizeOf(evs[0])
		if !ok || sp.Target != eventlog.InboxNextTurn {
			return out
		}
		n += sp.Start
	}
	out.Turn = &n
	return out
}
