package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

// Results of client-executed tools (E6): a turn that calls a client tool parks until the client
// posts the call's result here; GET lists the calls the parked turn waits for.

// MaxCallIDBytes bounds the callId of a posted tool result; model call ids are far shorter.
const MaxCallIDBytes = 256

// toolResults posts client tools' results through the post path (worker.Service): it appends the
// call's tool/client-result and wakes the parked turn. Its errors are fault errors: not_found when
// no client-executed call of that id waits in the session, conflict when the call has a result.
type toolResults interface {
	PostToolResult(ctx context.Context, tenantID, sessionID uuid.UUID, r eventlog.ClientResult) (eventlog.Event, error)
}

type toolResultRequest struct {
	CallID  string          `json:"callId"`
	Content json.RawMessage `json:"content"`
	IsError bool            `json:"isError"`
}

type toolResultPosted struct {
	CallID string `json:"callId"`
	Seq    int64  `json:"seq"`
}

// resultBlock is a content block of a posted result as the client sends it: text, or an image
// as base64 data; the fields of the other type are refused as unknown.
type resultBlock struct {
	Type      string  `json:"type"`
	Text      *string `json:"text"`
	MediaType string  `json:"mediaType"`
	Data      string  `json:"data"`
}

// parseResult checks a posted tool result and returns it as the log's ClientResult: a string
// content becomes one text block, an array holds text and image blocks.
func parseResult(req toolResultRequest) (eventlog.ClientResult, error) {
	switch {
	case req.CallID == "":
		return eventlog.ClientResult{}, fieldError("/callId", "callId must be a non-empty string")
	case len(req.CallID) > MaxCallIDBytes || !printable(req.CallID):
		return eventlog.ClientResult{}, fieldError("/callId", "callId must be printable text of at most 256 bytes")
	}
	content, err := parseContent(req.Content)
	if err != nil {
		return eventlog.ClientResult{}, err
	}
	return eventlog.ClientResult{CallID: req.CallID, Content: content, IsError: req.IsError}, nil
}

// parseContent reads content: a string, or an array of content blocks decoded strictly (unknown
// fields refused, as in every request body).
func parseContent(raw json.RawMessage) ([]llm.Block, error) {
	const want = "content must be a string or an array of content blocks"
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, fieldError("/content", "content is required: "+want)
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fieldError("/content", want)
		}
		return []llm.Block{llm.TextBlock(s)}, nil
	case '[':
	default:
		return nil, fieldError("/content", want)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fieldError("/content", want)
	}
	out := make([]llm.Block, 0, len(items))
	for i, item := range items {
		b, err := parseBlock(item)
		if err != nil {
			return nil, fieldError(fmt.Sprintf("/content/%d", i), fmt.Sprintf("content[%d]: %s", i, err.Error()))
		}
		out = append(out, b)
	}
	return out, nil
}

// parseBlock reads one content block of a posted result: {type: text, text} or {type: image,
// mediaType, data}.
func parseBlock(item json.RawMessage) (llm.Block, error) {
	var b resultBlock
	dec := json.NewDecoder(bytes.NewReader(item))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field == "" {
			return llm.Block{}, errors.New("must be a content block object")
		}
		_, detail := classify(jsonError(err))
		return llm.Block{}, errors.New(detail)
	}
	switch b.Type {
	case llm.BlockText:
		if b.Text == nil || b.MediaType != "" || b.Data != "" {
			return llm.Block{}, errors.New("a text block has text and nothing else")
		}
		return llm.TextBlock(*b.Text), nil
	case llm.BlockImage:
		if b.Text != nil || b.MediaType == "" || b.Data == "" {
			return llm.Block{}, errors.New("an image block has mediaType and data (base64) and nothing else")
		}
		return llm.Block{Type: llm.BlockImage, MediaType: b.MediaType, Data: b.Data}, nil
	}
	return llm.Block{}, fmt.Errorf(`type must be "text" or "image", not %q`, b.Type)
}

// handleToolResultPost posts the result of a client-executed call the session's parked turn waits
// for: 200 {callId, seq} with the seq of its tool/client-result. 400 for a bad body, 404 when no
// such call waits in the session, 409 when the call has a result already.
func (rs sessionResource) handleToolResultPost(w http.ResponseWriter, r *http.Request) {
	id, err := rs.sessionID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var req toolResultRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	res, err := parseResult(req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	tr, ok := rs.s.cfg.Turns.(toolResults)
	if !ok {
		writeError(w, r, errors.New("api: the turns service cannot post tool results"))
		return
	}
	ev, err := tr.PostToolResult(r.Context(), tenantID(r), id, res)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toolResultPosted{CallID: res.CallID, Seq: ev.Seq})
}

type pendingCall struct {
	CallID     string          `json:"callId"`
	ToolName   string          `json:"toolName"`
	Arguments  json.RawMessage `json:"arguments"`
	DeadlineMs int64           `json:"deadlineMs,omitempty"`
}

type pendingCallList struct {
	Turn      *int          `json:"turn"`      // the parked turn, null when none is parked
	ParkedSeq *int64        `json:"parkedSeq"` // its turn/parked, null when none is parked
	Items     []pendingCall `json:"items"`
}

// handleToolResultList answers the client-executed calls the session's parked turn waits for, in
// model order, each with its arguments as the call's pipeline got them: {turn, parkedSeq, items};
// no items (and null turn) unless the session's open turn is parked on client results.
func (rs sessionResource) handleToolResultList(w http.ResponseWriter, r *http.Request) {
	id, err := rs.sessionID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	tenant := tenantID(r)
	park, err := rs.park(r.Context(), tenant, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := pendingCallList{Items: []pendingCall{}}
	if park == nil {
		writeJSON(w, http.StatusOK, out)
		return
	}
	out.Turn, out.ParkedSeq = &park.Turn, &park.Seq
	var waits []eventlog.ParkWait
	if park.Cancel == nil {
		for _, wt := range park.Open() {
			if wt.Kind == eventlog.ParkClient {
				waits = append(waits, wt)
			}
		}
	}
	if len(waits) == 0 {
		writeJSON(w, http.StatusOK, out)
		return
	}
	args, err := rs.callArguments(r.Context(), tenant, id, park.Seq, len(park.Waits)+approvalCallWindow)
	if err != nil {
		writeError(w, r, err)
		return
	}
	for _, wt := range waits {
		a := args[wt.CallID]
		if a == nil {
			a = json.RawMessage("null")
		}
		out.Items = append(out.Items, pendingCall{CallID: wt.CallID, ToolName: wt.ToolName, Arguments: a, DeadlineMs: wt.DeadlineMs})
	}
	writeJSON(w, http.StatusOK, out)
}
