package eventlog

import (
	"encoding/json"
	"fmt"

	"github.com/dshd/dshd/pkg/llm"
)

// deriveMessage maps one surface node to its message (SES-5): a user/message gives its data, an
// assistant/message its message unless the content is empty, a tool/result its message; anything
// else gives nothing.
func deriveMessage(ev Event) (llm.Message, bool, error) {
	if m, ok, known := preparedMessage(ev); known {
		return m, ok, nil
	}
	var m llm.Message
	switch ev.Type {
	case TypeUserMessage:
		if err := json.Unmarshal(ev.Data, &m); err != nil {
			return m, false, fmt.Errorf("eventlog: seq %d: %w", ev.Seq, err)
		}
		return m, true, nil
	case TypeAssistantMessage, TypeToolResult:
		var d struct {
			Message llm.Message `json:"message"`
		}
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return m, false, fmt.Errorf("eventlog: seq %d: %w", ev.Seq, err)
		}
		if ev.Type == TypeAssistantMessage && len(d.Message.Content) == 0 {
			return m, false, nil
		}
		return d.Message, true, nil
	}
	return m, false, nil
}

// preparedMessage is deriveMessage from the payload of an event prepared in this process; known
// is false when ev has none of a surface kind.
func preparedMessage(ev Event) (m llm.Message, ok, known bool) {
	switch p := ev.payload.(type) {
	case UserMessage:
		return p.Message, true, ev.Type == TypeUserMessage
	case AssistantMessage:
		return p.Message, len(p.Message.Content) > 0, ev.Type == TypeAssistantMessage
	case ToolResult:
		return p.Message, true, ev.Type == TypeToolResult
	}
	return m, false, false
}

// DeriveMessages folds events (a whole log, seqs from 0, already validated) into the
// model-visible history (SES-5). An unknown non-ignorable type refuses the log (SES-9).
func DeriveMessages(events []Event) ([]llm.Message, error) {
	var sf SurfaceState
	for _, ev := range events {
		if !KnownType(ev.Type) && !ev.Ignorable {
			return nil, verr("SES-9", "unknown event type %q at seq %d", ev.Type, ev.Seq)
		}
		if err := sf.apply(ev, func(seq int64) (Event, error) { return events[seq], nil }); err != nil {
			return nil, err
		}
	}
	return DeriveNodes(sf.nodes, func(seq int64) Event { return events[seq] })
}

func DeriveNodes(nodes []int64, at func(int64) Event) ([]llm.Message, error) {
	out := make([]llm.Message, 0, len(nodes))
	for _, seq := range nodes {
		m, ok, err := deriveMessage(at(seq))
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, m)
		}
	}
	return out, nil
}
