package eventlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// FormatVersion is the pinned session format version (SES-9, SES-16). Any other version is refused.
const FormatVersion = 0

// Core event types (SES-8).
const (
	TypeTurnStart            = "turn/start"
	TypeTurnEnd              = "turn/end"
	TypeStepStart            = "step/start"
	TypeStepEnd              = "step/end"
	TypeUserMessage          = "user/message"
	TypeAssistantChunk       = "assistant/chunk"
	TypeAssistantMessage     = "assistant/message"
	TypeToolCall             = "tool/call"
	TypeToolResult           = "tool/result"
	TypeTodoWrite            = "todo/write"
	TypeRequestHeader        = "request/header"
	TypeRequestContext       = "request/context"
	TypeSessionEndSeed       = "session/end-seed"
	TypeToolCodeDispatch     = "tool/code-dispatch"
	TypeToolCodeDispatchInit = "tool/code-dispatch-start"
	TypeInboxSpliced         = "agent/inbox/spliced"
	TypeApprovalAsked        = "approval/asked"
	TypeApprovalDecided      = "approval/decided"
	TypeApprovalPolicy       = "approval/policy"
	TypeLLMRetry             = "llm/retry"
	// TypeAgentCancel is dshd's durable cancel request (AgentCancel), written ignorable.
	TypeAgentCancel = "agent/cancel"
	// TypeTurnTrace is dshd's trace id of a turn (TurnTrace), written ignorable.
	TypeTurnTrace = "turn/trace"
	// TypeAssistantUsage is dshd's usage of an interrupted model call (AssistantUsage), written
	// ignorable.
	TypeAssistantUsage = "assistant/usage"
)

// knownTypes is the vocabulary this build understands (SES-8, SES-9): the core kinds plus the
// plugin-owned kinds of the reference's known-event-types list. knownPrefixes covers the
// families docs/rules.md names with a wildcard.
var knownTypes = map[string]bool{
	"agent-preset/selected": true, TypeAgentCancel: true, TypeInboxSpliced: true, TypeApprovalAsked: true,
	TypeApprovalDecided: true, TypeApprovalPolicy: true, TypeAssistantChunk: true,
	TypeAssistantMessage: true, "command/done": true, "command/run": true, "compact/end": true,
	"compact/prune": true, "compact/start": true, "compact/summary": true,
	"feedback/record": true, "goal/change": true, "hook/invoked": true, "hook/result": true,
	TypeLLMRetry: true, "llm/retry-started": true, "permission/preset": true, "plan/mode": true,
	TypeRequestContext: true, TypeRequestHeader: true, "sandbox/mode": true,
	"schedule/change": true, TypeSessionEndSeed: true, "session/title": true,
	"session/title-llm-request": true, TypeStepEnd: true, TypeStepStart: true,
	"subagent/descriptor": true, TypeTodoWrite: true, "tool-workflow/agent-end": true,
	"tool-workflow/agent-start": true, "tool-workflow/run-end": true,
	"tool-workflow/run-start": true, TypeToolCall: true, TypeToolCodeDispatch: true,
	TypeToolCodeDispatchInit: true, TypeToolResult: true, TypeTurnEnd: true, TypeTurnStart: true,
	TypeUserMessage: true, "web/deepseek-search-llm-request": true, TypeTurnTrace: true, TypeAssistantUsage: true,
	TypeTurnParked: true, TypeTurnResumed: true, TypeClientResult: true,
}

var knownPrefixes = []string{"compaction/", "team/"}

// KnownTypes returns the kinds of the vocabulary of this build, sorted, and the families it knows
// by prefix ("compaction/"): what KnownType accepts.
func KnownTypes() (kinds, prefixes []string) {
	for k := range knownTypes {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	return kinds, slices.Clone(knownPrefixes)
}

// KnownType reports whether typ belongs to the event vocabulary of this build (SES-9).
func KnownType(typ string) bool {
	if knownTypes[typ] {
		return true
	}
	for _, p := range knownPrefixes {
		if strings.HasPrefix(typ, p) && len(typ) > len(p) {
			return true
		}
	}
	return false
}

// IsSurfaceType reports whether events of type typ join the model-visible surface (SES-2).
func IsSurfaceType(typ string) bool {
	return typ == TypeUserMessage || typ == TypeAssistantMessage || typ == TypeToolResult
}

// Event is one committed log entry (SES-1). Seq is its index in the session's log, contiguous
// from 0; Time is epoch milliseconds; Data is compact, lossless JSON exactly as validated. Events
// returned by this package are values: treat Data and SourceEventSeqs as read-only.
//
// Its JSON form is exactly {type, seq, time, data, surfaceOp?, sourceEventSeqs?, ignorable?:true}.
// SourceEventSeqs is written whenever it is non-nil, so an assistant/message citing no chunks
// carries "sourceEventSeqs":[].
type Event struct {
	Type            string
	Seq             int64
	Time            int64
	Data            json.RawMessage
	SurfaceOp       *SurfaceOp
	SourceEventSeqs []int64
	Ignorable       bool

	// payload is the validated payload Data was encoded from or decoded into when the event was
	// prepared in this process (Prepare, Log.Append), nil for an event read from a store: the
	// folds of this package and View read it instead of decoding Data again. A Go value or a
	// pointer to a value nobody else holds.
	payload Payload
}

// SurfaceOp says how a surface event joins the surface: append to the tail, or replace the
// current nodes from Start through End inclusive (SES-2, SES-3). Its JSON form is "append" or
// {"op":"replace","start":N,"end":M}.
type SurfaceOp struct {
	Replace    bool
	Start, End int64
}

// Append is the surfaceOp of an ordinary surface event. It is shared: never modify it.
var Append = &SurfaceOp{}

// ReplaceOp returns the surfaceOp of a replacement of the surface nodes start..end.
func ReplaceOp(start, end int64) *SurfaceOp { return &SurfaceOp{Replace: true, Start: start, End: end} }

// MarshalJSON implements json.Marshaler.
func (o SurfaceOp) MarshalJSON() ([]byte, error) {
	if !o.Replace {
		return []byte(`"append"`), nil
	}
	return fmt.Appendf(nil, `{"op":"replace","start":%d,"end":%d}`, o.Start, o.End), nil
}

// UnmarshalJSON implements json.Unmarshaler. It accepts exactly "append" or
// {"op":"replace","start":N,"end":M} with non-negative integers and no other key.
func (o *SurfaceOp) UnmarshalJSON(b []byte) error {
	if string(b) == `"append"` {
		*o = SurfaceOp{}
		return nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("surfaceOp must be \"append\" or {op:'replace', start, end}")
	}
	var op string
	var start, end int64
	if len(raw) != 3 || json.Unmarshal(raw["op"], &op) != nil || op != "replace" ||
		json.Unmarshal(raw["start"], &start) != nil || json.Unmarshal(raw["end"], &end) != nil ||
		start < 0 || end < 0 {
		return fmt.Errorf("surfaceOp must be \"append\" or {op:'replace', start, end}")
	}
	*o = SurfaceOp{Replace: true, Start: start, End: end}
	return nil
}

type eventJSON struct {
	Type            string          `json:"type"`
	Seq             int64           `json:"seq"`
	Time            int64           `json:"time"`
	Data            json.RawMessage `json:"data"`
	SurfaceOp       *SurfaceOp      `json:"surfaceOp,omitempty"`
	SourceEventSeqs *[]int64        `json:"sourceEventSeqs,omitempty"`
	Ignorable       bool            `json:"ignorable,omitempty"`
}

// MarshalJSON implements json.Marshaler.
func (e Event) MarshalJSON() ([]byte, error) {
	j := eventJSON{Type: e.Type, Seq: e.Seq, Time: e.Time, Data: e.Data, SurfaceOp: e.SurfaceOp,
		Ignorable: e.Ignorable}
	if j.Data == nil {
		j.Data = json.RawMessage("null")
	}
	if e.SourceEventSeqs != nil {
		j.SourceEventSeqs = &e.SourceEventSeqs
	}
	// Not json.Marshal: it would HTML-escape Data (& < > as \u0026 \u003c \u003e), so a page of
	// events and the stream would carry different bytes for the same event.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(j); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// UnmarshalJSON implements json.Unmarshaler. A missing time reads as 0 (the reference logs omit
// it); sourceEventSeqs:[] stays a non-nil empty slice.
func (e *Event) UnmarshalJSON(b []byte) error {
	var j eventJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*e = Event{Type: j.Type, Seq: j.Seq, Time: j.Time, Data: j.Data, SurfaceOp: j.SurfaceOp,
		Ignorable: j.Ignorable}
	if j.SourceEventSeqs != nil {
		e.SourceEventSeqs = *j.SourceEventSeqs
		if e.SourceEventSeqs == nil {
			e.SourceEventSeqs = []int64{}
		}
	}
	return nil
}

// NewEvent is an event to append. Data is a Payload of the vocabulary (Type may then be left
// empty: it is the payload's), validated as it is; or JSON bytes (json.RawMessage or []byte), or
// any other value encoding/json encodes, of a known or ignorable kind, as a seed or a foreign
// writer gives them, which is decoded into its kind's payload and validated. Seq is assigned by the log.
type NewEvent struct {
	Type            string
	Data            any
	SurfaceOp       *SurfaceOp
	SourceEventSeqs []int64
	Ignorable       bool
	// Time is the event's time in epoch milliseconds; 0 (the default) stamps it with the time of
	// the append. Crash repair's closers reuse the time of the log's last event (SES-14).
	Time int64
}

// View returns the payload P (a payload struct, as eventlog.ToolCall) of ev, as Decode does, for
// a reader that does not modify it: when ev was prepared in this process it is the payload ev
// was prepared from, sharing its slices and maps with it, and nothing is decoded.
func View[P any, PP interface {
	*P
	Payload
}](ev Event) (P, error) {
	if p, ok := prepared[P](ev); ok {
		return p, nil
	}
	return Decode[P, PP](ev)
}

// prepared returns ev's payload when ev was prepared in this process from a P.
func prepared[P any](ev Event) (P, bool) {
	switch p := any(ev.payload).(type) {
	case P:
		return p, true
	case *P:
		return *p, true
	}
	var zero P
	return zero, false
}

// Of returns the NewEvent of payload p, with no surface marker.
func Of(p Payload) NewEvent { return NewEvent{Type: p.Type(), Data: p} }

// SurfaceEvent returns the NewEvent of the surface payload p, appended to the surface and citing
// sources (SES-2, SES-3).
func SurfaceEvent(p Payload, sources ...int64) NewEvent {
	return NewEvent{Type: p.Type(), Data: p, SurfaceOp: Append, SourceEventSeqs: sources}
}

// encodePayload encodes a payload as compact, lossless JSON (SES-1) in a new slice: the usual
// kinds without reflection (appendPayload), the others with marshalPayload and the lossless
// check.
func encodePayload(p Payload) ([]byte, error) {
	e := payloadEncoders.Get().(*payloadEncoder)
	defer e.release()
	b, ok := appendPayload(e.scratch[:0], p)
	e.scratch = b[:0] // grown for the next payload
	if ok {
		return bytes.Clone(b), nil
	}
	b, err := marshalPayload(p)
	if err != nil {
		return nil, fmt.Errorf("data is not JSON: %w", err)
	}
	if b, err = losslessOwned(b); err != nil {
		return nil, fmt.Errorf("data is not lossless JSON: %w", err)
	}
	return b, nil
}

// marshalPayload encodes v compactly, without HTML escaping, into a new slice.
func marshalPayload(v any) ([]byte, error) {
	e := payloadEncoders.Get().(*payloadEncoder)
	defer e.release()
	if err := e.enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.Clone(bytes.TrimRight(e.buf.Bytes(), "\n")), nil
}

// payloadEncoder is a reusable encoder of marshalPayload: encoding into a grown buffer and
// copying the result out allocates once, where a fresh buffer grows several times.
type payloadEncoder struct {
	buf     bytes.Buffer
	enc     *json.Encoder
	scratch []byte // appendPayload's
}

// payloadEncoders holds idle payloadEncoders, a cache of buffers (sync.Pool).
var payloadEncoders = sync.Pool{New: func() any {
	e := &payloadEncoder{}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}}

// maxPooledBuffer is the largest buffer kept for reuse: a rare huge payload does not stay.
const maxPooledBuffer = 64 << 10

func (e *payloadEncoder) release() {
	if e.buf.Cap() > maxPooledBuffer || cap(e.scratch) > maxPooledBuffer {
		return
	}
	e.buf.Reset()
	payloadEncoders.Put(e)
}
