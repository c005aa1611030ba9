package eventlog

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"unicode"

	"github.com/dshd/dshd/pkg/fault"
)

// ValidationError is an event refused by the SES rules. Nothing was appended.
type ValidationError struct {
	Index  int    // position of the offending event in the appended batch (or seed)
	Seq    int64  // the seq it would have had, -1 when not yet assigned
	Type   string // its type
	Rule   string // the SES rule it breaks, e.g. "SES-2"
	Reason string // what is wrong, for humans
}

// Unwrap makes a validation error an invalid-request fault (fault.Invalid) for callers that map
// errors by code.
func (e *ValidationError) Unwrap() error {
	return &fault.Error{Code: fault.Invalid, Message: e.Error()}
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("eventlog: invalid event %d (%s): %s: %s", e.Index, e.Type, e.Rule, e.Reason)
}

func verr(rule, format string, args ...any) *ValidationError {
	return &ValidationError{Seq: -1, Rule: rule, Reason: fmt.Sprintf(format, args...)}
}

// prepare checks everything about ne that does not depend on the log (SES-1 lossless data,
// SES-2 markers, the local part of SES-3, SES-6 to SES-9, SES-12 header rules) and returns it as
// an Event without seq and time. A Payload is validated as it is, before it is encoded; JSON bytes
// are decoded into their kind's payload first.
func prepare(ne NewEvent) (Event, *ValidationError) {
	ev := Event{Type: ne.Type, SurfaceOp: ne.SurfaceOp, Ignorable: ne.Ignorable, Seq: -1, Time: max(ne.Time, 0)}
	if ne.SourceEventSeqs != nil {
		ev.SourceEventSeqs = slices.Clone(ne.SourceEventSeqs)
	}
	var raw []byte
	switch d := ne.Data.(type) {
	case json.RawMessage:
		raw = d
	case []byte:
		raw = d
	case nil:
		return ev, verr("SES-1", "data is required")
	case Payload:
		if ev.Type == "" {
			ev.Type = d.Type()
		}
		if d.Type() != ev.Type {
			return ev, verr("SES-8", "a %s payload cannot be the data of %s", d.Type(), ev.Type)
		}
		if err := d.Validate(); err != nil {
			return ev, verr(ruleFor(ev.Type), "%s: %v", ev.Type, err)
		}
		var err error
		if ev.Data, err = encodePayload(d); err != nil {
			return ev, verr("SES-1", "%v", err)
		}
		if reflect.TypeOf(d).Kind() != reflect.Pointer {
			// Kept for View: the struct is copied, but its slices and maps are the caller's, who
			// must not modify them once the event is prepared (Prepare).
			ev.payload = d
		}
		return ev, checkShape(ev)
	default: // any other Go value is encoded and checked like JSON bytes
		b, err := marshalPayload(d)
		if err != nil {
			return ev, verr("SES-1", "data is not JSON: %v", err)
		}
		raw = b
	}
	var err error
	if ev.Data, err = losslessJSON(raw); err != nil {
		return ev, verr("SES-1", "data is not lossless JSON: %v", err)
	}
	p, v := checkPayload(ev)
	if p != nil {
		ev.payload = reflect.ValueOf(p).Elem().Interface().(Payload) // decoded here: nobody else holds it
	}
	return ev, v
}

// checkLocal applies the log-independent rules to a complete event (new, seeded or loaded).
func checkLocal(ev Event) *ValidationError {
	_, v := checkPayload(ev)
	return v
}

// checkPayload is checkLocal, returning the payload it decoded (nil for a kind without one).
func checkPayload(ev Event) (Payload, *ValidationError) {
	if v := checkShape(ev); v != nil || kinds[ev.Type] == nil {
		return nil, v
	}
	p, err := DecodePayload(ev.Type, ev.Data)
	if err == nil {
		err = p.Validate()
	}
	if err != nil {
		return nil, verr(ruleFor(ev.Type), "%s: %v", ev.Type, err)
	}
	return p, nil
}

// checkShape applies the rules that do not look into the data: the type, the markers, the
// vocabulary, and that data is an object.
func checkShape(ev Event) *ValidationError {
	if ev.Type == "" {
		return verr("SES-1", "type is required")
	}
	if len(ev.Type) > 200 || strings.IndexFunc(ev.Type, unicode.IsControl) >= 0 {
		return verr("SES-1", "type must be at most 200 characters without control characters")
	}
	if v := checkMarkers(ev); v != nil {
		return v
	}
	if !KnownType(ev.Type) {
		if !ev.Ignorable {
			return verr("SES-9", "unknown event type %q (only ignorable events may have unknown types)", ev.Type)
		}
		return nil
	}
	if len(ev.Data) == 0 || ev.Data[0] != '{' {
		return verr("SES-8", "data of %s must be a JSON object", ev.Type)
	}
	return nil
}

func ruleFor(typ string) string {
	switch typ {
	case TypeUserMessage, TypeAssistantMessage:
		return "SES-6"
	case TypeToolResult:
		return "SES-7"
	case TypeRequestHeader:
		return "SES-12"
	}
	return "SES-8"
}

// checkMarkers applies SES-2 and the local part of SES-3.
func checkMarkers(ev Event) *ValidationError {
	if !IsSurfaceType(ev.Type) {
		if ev.SurfaceOp != nil {
			return verr("SES-2", "%s is not a surface event and must not carry surfaceOp", ev.Type)
		}
		if ev.SourceEventSeqs != nil {
			return verr("SES-2", "%s is not a surface event and must not carry sourceEventSeqs", ev.Type)
		}
		return nil
	}
	if ev.SurfaceOp == nil {
		return verr("SES-2", "%s is a surface event and requires surfaceOp", ev.Type)
	}
	if ev.Ignorable {
		return verr("SES-2", "surface events cannot be ignorable")
	}
	if op := ev.SurfaceOp; op.Replace && (op.Start < 0 || op.End < 0) {
		return verr("SES-3", "replace start and end must be non-negative")
	}
	if ev.SourceEventSeqs != nil && len(ev.SourceEventSeqs) == 0 && ev.Type != TypeAssistantMessage {
		return verr("SES-3", "sourceEventSeqs may be empty only on assistant/message")
	}
	seen := make(map[int64]struct{}, len(ev.SourceEventSeqs))
	for _, s := range ev.SourceEventSeqs {
		if s < 0 {
			return verr("SES-3", "sourceEventSeqs entries must be non-negative, got %d", s)
		}
		if _, dup := seen[s]; dup {
			return verr("SES-3", "sourceEventSeqs must not contain duplicates (%d)", s)
		}
		seen[s] = struct{}{}
	}
	return nil
}

// checkSeq applies the seq-dependent part of SES-3 once the event's seq is known: every source
// must be an earlier event.
func checkSeq(ev Event) *ValidationError {
	for _, s := range ev.SourceEventSeqs {
		if s >= ev.Seq {
			return verr("SES-3", "sourceEventSeqs must reference earlier events: %d >= own seq %d", s, ev.Seq)
		}
	}
	return nil
}

// maxSource returns the largest source seq of ev, or -1.
func MaxSource(ev Event) int64 {
	m := int64(-1)
	for _, s := range ev.SourceEventSeqs {
		m = max(m, s)
	}
	return m
}

// Prepare checks the log-independent rules of every event of a batch (see NewEvent) and returns
// them as events without seq and time; the first invalid event fails the batch with a
// *ValidationError naming its index. An event keeps the payload struct it was prepared from, for
// View: the slices and maps a payload holds are shared with the caller, which must not modify
// them afterwards (every writer builds a payload for its append and drops it).
func Prepare(evs []NewEvent) ([]Event, error) {
	batch := make([]Event, len(evs))
	for i, ne := range evs {
		ev, v := prepare(ne)
		if v != nil {
			v.Index, v.Type = i, ne.Type
			return nil, v
		}
		batch[i] = ev
	}
	return batch, nil
}

// Check applies the log-independent rules to a complete event (seeded, loaded or synthesized, as
// crash repair's closers); nil or a *ValidationError.
func Check(ev Event) error {
	if v := checkLocal(ev); v != nil {
		return v
	}
	return nil
}
