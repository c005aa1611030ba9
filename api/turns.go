package api

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/worker"
)

// Turns runs sessions' turns: posting messages to their inbox and cancelling (pkg/worker).
type Turns interface {
	Post(ctx context.Context, tenantID, sessionID uuid.UUID, msg llm.Message, mode string, idem *worker.Idempotency) (worker.Posted, error)
	Cancel(ctx context.Context, tenantID, sessionID uuid.UUID, keepInbox bool) (bool, error)
	// Hold takes the session's run lease for work that must not overlap a turn of it (a fork's
	// copy of its workspace): worker.ErrSessionBusy while another owner's lease is recorded.
	// Confirm it after the work; Release it once.
	Hold(ctx context.Context, tenantID, sessionID uuid.UUID) (*worker.Held, error)
}

// Prompts tells what a session's agent would send the model, and lists the built-in tools
// (agents.Prompter). A prompt that cannot be assembled is a *promptasm.AssemblyError, a model
// provider that cannot be used an *llm.Error; both are the client's to fix.
type Prompts interface {
	Prompt(ctx context.Context, tenantID uuid.UUID, sess eventlog.Session) (system string, tools []llm.ToolSchema, err error)
	Tools() ([]registry.CatalogueItem, error)
}

// MaxMessageBytes bounds the text of one posted message.
const MaxMessageBytes = 256 << 10

type messageRequest struct {
	Content *string `json:"content"`
	Mode    string  `json:"mode"`
}

type messageResponse struct {
	MessageID string `json:"messageId"`
	Seq       int64  `json:"seq"`
	Turn      *int   `json:"turn,omitempty"` // the turn that will serve it, when known (turns_resource.go)
	StreamURL string `json:"streamUrl"`
}

// handleMessageCreate posts a message to the session's inbox (LOOP-1) and answers 202
// {messageId, seq}; with Accept: text/event-stream it streams the session's events from the
// message's splice until the turn that serves the message ends. An Idempotency-Key makes a retry
// return the original answer; the same key with another request answers 409.
func (rs sessionResource) handleMessageCreate(w http.ResponseWriter, r *http.Request) {
	var req messageRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if req.Mode == "" {
		req.Mode = worker.ModeFollowup
	}
	switch {
	case req.Content == nil || strings.TrimSpace(*req.Content) == "":
		writeError(w, r, fieldError("/content", "content must be a non-empty string"))
		return
	case len(*req.Content) > MaxMessageBytes:
		writeError(w, r, fieldError("/content", "content is longer than 256 KiB"))
		return
	case req.Mode != worker.ModeFollowup && req.Mode != worker.ModeSteer && req.Mode != worker.ModeInject:
		writeError(w, r, fieldError("/mode", `mode must be "followup", "steer" or "inject"`))
		return
	}
	// The session is not read first: the post reads it with its head (404 for another tenant's
	// or a deleted session, 409 no_preset without a preset).
	id, err := rs.sessionID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if !rs.s.checkQuota(w, r, pgstore.ForPost) {
		return
	}
	var idem *worker.Idempotency
	key, err := idempotencyKey(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if key != "" {
		h := sha256.New()
		h.Write([]byte(id.String() + "\x00" + req.Mode + "\x00" + *req.Content))
		idem = &worker.Idempotency{Key: key, Hash: h.Sum(nil)}
	}
	// The stream's place is taken before the message is posted: a refused stream posts nothing.
	release := func() {}
	if acceptsEventStream(r) {
		var ok bool
		if release, ok = rs.s.reserveOrRefuse(w, r, id); !ok {
			return
		}
		// Subscribed from before the post until the stream ends, the hub keeps vouching for the
		// session's commits it was told of (the post's, the runner's: pgstore.Hub.Observe) however
		// soon the turn ends: the stream's tail then learns where the log ends without a read.
		_, unsub := rs.s.cfg.Hub.Subscribe(id)
		reserved := release
		release = func() { unsub(); reserved() }
	}
	msg := llm.NewUserMessage(uuid.NewString(), *req.Content)
	posted, err := rs.s.cfg.Turns.Post(r.Context(), tenantID(r), id, msg, req.Mode, idem)
	if err != nil {
		release()
		writeError(w, r, err)
		return
	}
	if acceptsEventStream(r) {
		t := &turnWatch{messageID: posted.MessageID, inject: req.Mode == worker.ModeInject}
		// The post read the session's head: the stream starts its tail there without reading the
		// session (a replay, which reads no head, lets the stream read it).
		rs.s.stream(w, r, id, eventQuery{after: posted.Seq - 1}, posted.LastSeq, posted.Events, t.observe, release)
		return
	}
	writeJSON(w, http.StatusAccepted, rs.messageAccepted(r, id, req.Mode, posted))
}

// turnWatch follows a message's stream, which starts at the message's splice into the inbox, to
// find where the stream ends: at the end of the turn that serves the message (the turn whose
// step enters it as a `user/message`), or of the turn that claims the message from the inbox but
// discards it because it cannot take a step (the prompt does not assemble: turn/end {kind:
// error}), or at the cancel that clears the message from the inbox. An inject never wakes a
// turn, so its stream ends with its splice. The watcher folds the message's place in the inbox
// through every splice to tell its claim from other messages'.
type turnWatch struct {
	messageID string
	inject    bool
	current   int    // the open turn, from turn/start and step/start
	serving   int    // the turn that entered the message, 0 before
	target    string // the inbox list that holds the message, "" before its splice
	pos       int    // its index in that list
	claimed   bool   // a turn took it out of the inbox
}

func (t *turnWatch) observe(ev eventlog.Event) (last bool) {
	switch ev.Type {
	case eventlog.TypeTurnStart, eventlog.TypeStepStart, eventlog.TypeTurnEnd:
		n, ok := eventlog.TurnNumber(ev)
		if !ok {
			return false
		}
		if ev.Type != eventlog.TypeTurnEnd {
			t.current = n
			return false
		}
		if t.serving != 0 {
			return n == t.serving
		}
		return t.claimed // claimed, never entered: this turn discarded it
	case eventlog.TypeUserMessage:
		if id, ok := eventlog.MessageID(ev); ok && id == t.messageID && t.serving == 0 {
			t.serving = t.current
		}
	case eventlog.TypeInboxSpliced:
		s, err := eventlog.View[eventlog.InboxSpliced](ev)
		if err != nil {
			return false
		}
		return t.splice(s)
	}
	return false
}

// splice follows the message's place in the inbox through s; true when s ends the stream.
func (t *turnWatch) splice(s eventlog.InboxSpliced) bool {
	if t.target == "" {
		for i, m := range s.Inserted {
			if m.ID == t.messageID {
				t.target, t.pos = s.Target, s.Start+i
				return t.inject
			}
		}
		// Not seen the message's own splice (cannot happen: the stream starts at it): a cancel
		// that clears the inbox is the only end to look for.
		return s.Outcome == eventlog.OutcomeCanceled && t.serving == 0
	}
	if t.claimed || s.Target != t.target {
		return false
	}
	switch n := s.Removed(); {
	case t.pos < s.Start:
	case t.pos < s.Start+n:
		if s.Outcome == eventlog.OutcomeCanceled {
			return true // cleared by a cancel before a turn took it
		}
		t.claimed = true
	default:
		t.pos += len(s.Inserted) - n
	}
	return false
}

// runnable reads the {id} session of the request's tenant and checks that it has a preset to run;
// otherwise it answers the problem and returns false.
func (rs sessionResource) runnable(w http.ResponseWriter, r *http.Request) (eventlog.Session, bool) {
	id, err := rs.sessionID(r)
	if err == nil {
		var sess eventlog.Session
		if sess, err = rs.s.cfg.Log.SessionGet(r.Context(), tenantID(r), id); err == nil {
			if sess.PresetID == nil {
				writeProblem(w, CodeNoPreset, "the session has no preset to run")
				return sess, false
			}
			return sess, true
		}
	}
	writeError(w, r, err)
	return eventlog.Session{}, false
}

type cancelRequest struct {
	KeepInbox bool `json:"keepInbox"`
}

type cancelResponse struct {
	Cancelled bool `json:"cancelled"`
}

// handleSessionCancel cancels the session's running turn (LOOP-7): 200 {cancelled}. cancelled is
// false for an idle session, where cancel does nothing.
func (rs sessionResource) handleSessionCancel(w http.ResponseWriter, r *http.Request) {
	id, err := rs.sessionID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var req cancelRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(r, &req); err != nil {
			writeError(w, r, err)
			return
		}
	}
	done, err := rs.s.cfg.Turns.Cancel(r.Context(), tenantID(r), id, req.KeepInbox)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, cancelResponse{Cancelled: done})
}

type promptResponse struct {
	System string           `json:"system"`
	Tools  []llm.ToolSchema `json:"tools"`
}

// handleSessionPrompt answers the system prompt and wire tools the session's model would get now.
func (rs sessionResource) handleSessionPrompt(w http.ResponseWriter, r *http.Request) {
	sess, ok := rs.runnable(w, r)
	if !ok {
		return
	}
	system, tools, err := rs.s.cfg.Prompts.Prompt(r.Context(), tenantID(r), sess)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if tools == nil {
		tools = []llm.ToolSchema{}
	}
	writeJSON(w, http.StatusOK, promptResponse{System: system, Tools: tools})
}

// handleToolList answers the catalogue of built-in tools.
func (s *Server) handleToolList(w http.ResponseWriter, r *http.Request) {
	items, err := s.cfg.Prompts.Tools()
	if err != nil {
		writeError(w, r, err)
		return
	}
	if items == nil {
		items = []registry.CatalogueItem{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}
