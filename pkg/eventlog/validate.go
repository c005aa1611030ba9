package eventlog

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/dshd/dshd/pkg/llm"
)

// ValidationError is an event refused by the SES rules. Nothing was appended.
type ValidationError struct {
	Index  int    // position of the offending event in the appended batch (or seed)
	Seq    int64  // the seq it would have had, -1 when not yet assigned
	Type   string // its type
	Rule   string // the SES rule it breaks, e.g. "SES-2"
	Reason string // what is wrong, for humans
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("eventlog: invalid event %d (%s): %s: %s", e.Index, e.Type, e.Rule, e.Reason)
}

func verr(rule, format string, args ...any) *ValidationError {
	return &ValidationError{Seq: -1, Rule: rule, Reason: fmt.Sprintf(format, args...)}
}

// prepare checks everything about ne that does not depend on the log (SES-1 lossless data,
// SES-2 markers, the local part of SES-3, SES-6 to SES-9, SES-12 header rules) and returns it as
// an Event without seq and time.
func prepare(ne NewEvent) (Event, *ValidationError) {
	ev := Event{Type: ne.Type, SurfaceOp: ne.SurfaceOp, Ignorable: ne.Ignorable, Seq: -1}
	if ne.SourceEventSeqs != nil {
		ev.SourceEventSeqs = slices.Clone(ne.SourceEventSeqs)
	}
	raw, err := ne.rawData()
	if err != nil {
		return ev, verr("SES-1", "data is not JSON: %v", err)
	}
	if ev.Data, err = losslessJSON(raw); err != nil {
		return ev, verr("SES-1", "data is not lossless JSON: %v", err)
	}
	return ev, checkLocal(ev)
}

// checkLocal applies the log-independent rules to a complete event (new, seeded or loaded).
func checkLocal(ev Event) *ValidationError {
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
	if check := dataChecks[ev.Type]; check != nil {
		if err := check(ev.Data); err != nil {
			return verr(ruleFor(ev.Type), "%s: %v", ev.Type, err)
		}
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
func maxSource(ev Event) int64 {
	m := int64(-1)
	for _, s := range ev.SourceEventSeqs {
		m = max(m, s)
	}
	return m
}

// Data shapes (SES-8). They check what readers of the log rely on, not every optional field.

type turnData struct {
	Turn *int64 `json:"turn"`
}

type stepData struct {
	Turn *int64 `json:"turn"`
	Step *int64 `json:"step"`
}

func (d stepData) check() error {
	if d.Turn == nil || *d.Turn < 1 {
		return fmt.Errorf("turn must be an integer >= 1")
	}
	if d.Step == nil || *d.Step < 1 {
		return fmt.Errorf("step must be an integer >= 1")
	}
	return nil
}

type turnEndData struct {
	Turn   *int64 `json:"turn"`
	Reason *struct {
		Kind string `json:"kind"`
	} `json:"reason"`
}

type assistantData struct {
	stepData
	Message     *llm.Message    `json:"message"`
	Usage       json.RawMessage `json:"usage"`
	Interrupted *bool           `json:"interrupted"`
}

type toolCallData struct {
	stepData
	CallID    string  `json:"callId"`
	Name      string  `json:"name"`
	Arguments *string `json:"arguments"`
}

type toolResultData struct {
	stepData
	Message *llm.Message `json:"message"`
	Error   *struct {
		Name *string `json:"name"`
		Code *string `json:"code"`
	} `json:"error"`
}

type requestHeaderData struct {
	Header *struct {
		Config          map[string]json.RawMessage `json:"config"`
		AdapterDefaults map[string]bool            `json:"adapterDefaults"`
		System          *string                    `json:"system"`
		Tools           []json.RawMessage          `json:"tools"`
	} `json:"header"`
	Reason string `json:"reason"`
}

type codeDispatchData struct {
	RootCallID   string          `json:"rootCallId"`
	ParentCallID string          `json:"parentCallId"`
	SubCallID    string          `json:"subCallId"`
	Name         string          `json:"name"`
	Arguments    json.RawMessage `json:"arguments"`
	IsError      *bool           `json:"isError"`
	Content      []llm.Block     `json:"content"`
}

func decode[T any](b []byte) (T, error) {
	var v T
	err := json.Unmarshal(b, &v)
	return v, err
}

var dataChecks = map[string]func([]byte) error{
	TypeTurnStart: func(b []byte) error {
		d, err := decode[turnData](b)
		if err == nil && (d.Turn == nil || *d.Turn < 1) {
			err = fmt.Errorf("turn must be an integer >= 1")
		}
		return err
	},
	TypeTurnEnd: func(b []byte) error {
		d, err := decode[turnEndData](b)
		switch {
		case err != nil:
		case d.Turn == nil || *d.Turn < 1:
			err = fmt.Errorf("turn must be an integer >= 1")
		case d.Reason == nil || d.Reason.Kind == "":
			err = fmt.Errorf("reason must be an object with a kind")
		}
		return err
	},
	TypeStepStart:      checkStep,
	TypeStepEnd:        checkStep,
	TypeAssistantChunk: checkChunk,
	TypeUserMessage: func(b []byte) error {
		m, err := decode[llm.Message](b)
		if err != nil {
			return err
		}
		if m.Role != llm.RoleUser {
			return fmt.Errorf("a user/message must have role user")
		}
		return m.Validate()
	},
	TypeAssistantMessage: func(b []byte) error {
		d, err := decode[assistantData](b)
		if err != nil {
			return err
		}
		if err := d.check(); err != nil {
			return err
		}
		if d.Message == nil {
			return fmt.Errorf("message is required")
		}
		if d.Message.Role != llm.RoleAssistant {
			return fmt.Errorf("message must have role assistant")
		}
		return d.Message.Validate()
	},
	TypeToolCall: func(b []byte) error {
		d, err := decode[toolCallData](b)
		switch {
		case err != nil:
		case d.check() != nil:
			err = d.check()
		case d.CallID == "" || d.Name == "":
			err = fmt.Errorf("callId and name must be non-empty strings")
		case d.Arguments == nil:
			err = fmt.Errorf("arguments must be a string")
		}
		return err
	},
	TypeToolResult:           checkToolResult,
	TypeRequestHeader:        checkRequestHeader,
	TypeToolCodeDispatchInit: checkCodeDispatch(false),
	TypeToolCodeDispatch:     checkCodeDispatch(true),
	TypeRequestContext: func(b []byte) error {
		d, err := decode[struct {
			Provider string `json:"provider"`
			Model    string `json:"model"`
		}](b)
		if err == nil && (d.Provider == "" || d.Model == "") {
			err = fmt.Errorf("provider and model are required")
		}
		return err
	},
	TypeTodoWrite: func(b []byte) error {
		d, err := decode[struct {
			Todos *[]struct {
				Content *string `json:"content"`
				Status  *string `json:"status"`
			} `json:"todos"`
		}](b)
		if err != nil {
			return err
		}
		if d.Todos == nil {
			return fmt.Errorf("todos must be an array")
		}
		for i, t := range *d.Todos {
			if t.Content == nil || t.Status == nil {
				return fmt.Errorf("todos[%d] needs content and status strings", i)
			}
		}
		return nil
	},
	TypeInboxSpliced: func(b []byte) error {
		d, err := decode[struct {
			Target   string         `json:"target"`
			Start    *int64         `json:"start"`
			Inserted *[]llm.Message `json:"inserted"`
		}](b)
		switch {
		case err != nil:
		case d.Target != "next-turn" && d.Target != "next-step":
			err = fmt.Errorf("target must be next-turn or next-step")
		case d.Start == nil || *d.Start < 0:
			err = fmt.Errorf("start must be a non-negative integer")
		case d.Inserted == nil:
			err = fmt.Errorf("inserted must be an array")
		}
		return err
	},
	TypeLLMRetry:        checkRetry,
	TypeApprovalAsked:   func(b []byte) error { return requireStrings(b, "id", "toolName") },
	TypeApprovalDecided: func(b []byte) error { return requireStrings(b, "id", "outcome") },
}

// requireStrings checks that data holds every field as a non-empty string.
func requireStrings(b []byte, fields ...string) error {
	d, err := decode[map[string]json.RawMessage](b)
	if err != nil {
		return err
	}
	for _, f := range fields {
		var v string
		if json.Unmarshal(d[f], &v) != nil || v == "" {
			return fmt.Errorf("%s must be a non-empty string", f)
		}
	}
	return nil
}

// checkRetry checks an `llm/retry`: inside a step, a non-negative delayMs, and the code of the
// failure that is retried, as dshd writes it (code) or as the reference does (failure.code).
func checkRetry(b []byte) error {
	d, err := decode[struct {
		stepData
		DelayMs *float64 `json:"delayMs"`
		Code    string   `json:"code"`
		Failure *struct {
			Code string `json:"code"`
		} `json:"failure"`
	}](b)
	switch {
	case err != nil:
	case d.check() != nil:
		err = d.check()
	case d.DelayMs == nil || *d.DelayMs < 0:
		err = fmt.Errorf("delayMs must be a number >= 0")
	case d.Code == "" && (d.Failure == nil || d.Failure.Code == ""):
		err = fmt.Errorf("code must be a non-empty string")
	}
	return err
}

func checkStep(b []byte) error {
	d, err := decode[stepData](b)
	if err != nil {
		return err
	}
	return d.check()
}

func checkChunk(b []byte) error {
	d, err := decode[struct {
		stepData
		Chunk json.RawMessage `json:"chunk"`
	}](b)
	if err != nil {
		return err
	}
	if err := d.check(); err != nil {
		return err
	}
	if len(d.Chunk) == 0 || d.Chunk[0] != '{' {
		return fmt.Errorf("chunk must be an object")
	}
	return nil
}

func checkToolResult(b []byte) error {
	d, err := decode[toolResultData](b)
	if err != nil {
		return err
	}
	if err := d.check(); err != nil {
		return err
	}
	if d.Message == nil {
		return fmt.Errorf("message is required")
	}
	m := d.Message
	if m.Role != llm.RoleUser || m.Source.Kind != llm.SourceTool {
		return fmt.Errorf("message must have role user and source {kind:'tool', callId}")
	}
	if err := m.Validate(); err != nil {
		return err
	}
	if d.Error != nil && (d.Error.Name == nil || d.Error.Code == nil) {
		return fmt.Errorf("error must be {name, code}")
	}
	return nil
}

// checkRequestHeader applies SES-12: the config carries provider and model, and adapterDefaults
// markers are true only for fields present in the config.
func checkRequestHeader(b []byte) error {
	d, err := decode[requestHeaderData](b)
	if err != nil {
		return err
	}
	if d.Header == nil || d.Header.Config == nil {
		return fmt.Errorf("header.config is required")
	}
	for _, k := range []string{"provider", "model"} {
		var s string
		if json.Unmarshal(d.Header.Config[k], &s) != nil || s == "" {
			return fmt.Errorf("header.config must carry %s", k)
		}
	}
	for k, v := range d.Header.AdapterDefaults {
		if _, ok := d.Header.Config[k]; v && !ok {
			return fmt.Errorf("adapterDefaults.%s is true but config has no %s", k, k)
		}
	}
	if d.Reason == "" {
		return fmt.Errorf("reason is required")
	}
	return nil
}

func checkCodeDispatch(settled bool) func([]byte) error {
	return func(b []byte) error {
		d, err := decode[codeDispatchData](b)
		switch {
		case err != nil:
		case d.RootCallID == "" || d.ParentCallID == "" || d.SubCallID == "" || d.Name == "":
			err = fmt.Errorf("rootCallId, parentCallId, subCallId and name are required")
		case len(d.Arguments) == 0:
			err = fmt.Errorf("arguments are required")
		case settled && (d.IsError == nil || d.Content == nil):
			err = fmt.Errorf("isError and content are required")
		}
		return err
	}
}
