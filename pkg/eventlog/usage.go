package eventlog

import (
	"encoding/json"
	"slices"

	"github.com/dshd/dshd/pkg/llm"
)

// Usage is what a part of a log cost. It is derived from the events alone, so the same events
// always give the same usage, whoever folds them (the turn resource over HTTP, the usage tables
// the store keeps in step with every append, a test summing whole logs):
//   - tokens: the usage of each assistant/message, and of each assistant/usage (dshd's
//     extension event for an interrupted call, whose message carries none);
//   - model calls: one per step/start, one more per llm/retry (each retry was a failed call);
//   - model errors: each llm/retry, and the last attempt of a turn that ended on a model
//     failure (a turn/end of kind error with a model failure code);
//   - tool calls: each tool/call; tool errors: each tool/result with an error or an error block.
//
// Code-mode sub-calls are part of their run_code call (its tool/call), not tool calls of their own.
type Usage struct {
	InputTokens     int64 `json:"inputTokens"`
	OutputTokens    int64 `json:"outputTokens"`
	CacheReadTokens int64 `json:"cacheReadTokens"`
	CacheMissTokens int64 `json:"cacheMissTokens"`
	ReasoningTokens int64 `json:"reasoningTokens"`
	ModelCalls      int64 `json:"modelCalls"`
	ToolCalls       int64 `json:"toolCalls"`
	ToolErrors      int64 `json:"toolErrors"`
	ModelErrors     int64 `json:"modelErrors"`
}

// Add adds o to u.
func (u *Usage) Add(o Usage) {
	u.InputTokens += o.InputTokens
	u.OutputTokens += o.OutputTokens
	u.CacheReadTokens += o.CacheReadTokens
	u.CacheMissTokens += o.CacheMissTokens
	u.ReasoningTokens += o.ReasoningTokens
	u.ModelCalls += o.ModelCalls
	u.ToolCalls += o.ToolCalls
	u.ToolErrors += o.ToolErrors
	u.ModelErrors += o.ModelErrors
}

// Tokens is the tokens a token quota counts: input and output (reasoning tokens are part of the
// output; cached input is part of the input).
func (u Usage) Tokens() int64 { return u.InputTokens + u.OutputTokens }

// IsZero reports whether u counts nothing.
func (u Usage) IsZero() bool { return u == Usage{} }

// ModelFailureCodes are the failure codes of a model call (pkg/llm): a turn that ended with one
// of them ended on a failed model call.
var ModelFailureCodes = []string{llm.CodeContextWindowExceeded, llm.CodeQuota, llm.CodeRateLimit,
	llm.CodeEmptyResponse, llm.CodeInvalidCredential, llm.CodeTransport, llm.CodeServer, llm.CodeTimeout}

// usageKinds are the kinds that carry usage or a turn boundary.
var usageKinds = []string{TypeTurnStart, TypeTurnEnd, TypeStepStart, TypeLLMRetry, TypeAssistantMessage,
	TypeAssistantUsage, TypeToolCall, TypeToolResult}

// UsageKinds returns the event kinds EventUsage reads: a reader that only wants usage may
// filter the log by them.
func UsageKinds() []string { return slices.Clone(usageKinds) }

// The parts of an event's data EventUsage reads, one decode per event: the turn of every kind,
// the usage of an assistant/message, the error and blocks of a tool/result (llm/retry's message is
// a string, so each kind is decoded into its own shape).
type (
	usageTurn struct {
		Turn *int `json:"turn"`
	}
	usageMessage struct {
		Turn  *int       `json:"turn"`
		Usage *llm.Usage `json:"usage"`
	}
	usageResult struct {
		Turn    *int `json:"turn"`
		Message struct {
			Content []struct {
				IsError bool `json:"isError"`
			} `json:"content"`
		} `json:"message"`
		Error json.RawMessage `json:"error"`
	}
)

// EventUsage returns what ev adds to the usage of its turn, and that turn. ok is false for an
// event that is not of a usage kind or names no turn.
func EventUsage(ev Event) (turn int, u Usage, ok bool) {
	_, u, turn, ok = eventUsage(ev)
	return turn, u, ok
}

// eventUsage is EventUsage, with the end reason kind of a turn/end.
func eventUsage(ev Event) (endKind string, u Usage, turn int, ok bool) {
	if ev.payload != nil {
		if endKind, u, turn, ok, known := preparedUsage(ev); known {
			return endKind, u, turn, ok
		}
	}
	var t *int
	switch ev.Type {
	case TypeTurnEnd:
		var end TurnEnd
		if json.Unmarshal(ev.Data, &end) != nil {
			return "", u, 0, false
		}
		if end.Reason.Kind == EndError && end.Reason.Error != nil && slices.Contains(ModelFailureCodes, end.Reason.Error.Code) {
			u.ModelErrors = 1
		}
		return end.Reason.Kind, u, end.Turn, true
	case TypeTurnStart, TypeStepStart, TypeLLMRetry, TypeToolCall:
		var d usageTurn
		if json.Unmarshal(ev.Data, &d) != nil {
			return "", u, 0, false
		}
		t = d.Turn
		switch ev.Type {
		case TypeStepStart:
			u.ModelCalls = 1
		case TypeLLMRetry:
			u.ModelCalls, u.ModelErrors = 1, 1
		case TypeToolCall:
			u.ToolCalls = 1
		}
	case TypeAssistantMessage, TypeAssistantUsage:
		var m usageMessage
		if json.Unmarshal(ev.Data, &m) != nil {
			return "", u, 0, false
		}
		t = m.Turn
		if m.Usage != nil {
			u.InputTokens, u.OutputTokens = int64(m.Usage.InputTokens), int64(m.Usage.OutputTokens)
			u.CacheReadTokens, u.CacheMissTokens = int64(m.Usage.CacheReadTokens), int64(m.Usage.CacheMissTokens)
			u.ReasoningTokens = int64(m.Usage.ReasoningTokens)
		}
	case TypeToolResult:
		var r usageResult
		if json.Unmarshal(ev.Data, &r) != nil {
			return "", u, 0, false
		}
		t = r.Turn
		failed := len(r.Error) > 0 && string(r.Error) != "null"
		for _, b := range r.Message.Content {
			failed = failed || b.IsError
		}
		if failed {
			u.ToolErrors = 1
		}
	default:
		return "", u, 0, false
	}
	if t == nil {
		return "", Usage{}, 0, false
	}
	return "", u, *t, true
}

// preparedUsage is eventUsage from the payload of an event prepared in this process, reading what
// the decode of its data would read; known is false when ev has no payload of a usage kind.
func preparedUsage(ev Event) (endKind string, u Usage, turn int, ok, known bool) {
	switch p := ev.payload.(type) {
	case TurnEnd:
		if p.Reason.Kind == EndError && p.Reason.Error != nil && slices.Contains(ModelFailureCodes, p.Reason.Error.Code) {
			u.ModelErrors = 1
		}
		return p.Reason.Kind, u, p.Turn, true, ev.Type == TypeTurnEnd
	case TurnStart:
		return "", u, p.Turn, true, ev.Type == TypeTurnStart
	case StepStart:
		u.ModelCalls = 1
		return "", u, p.Turn, true, ev.Type == TypeStepStart
	case LLMRetry:
		u.ModelCalls, u.ModelErrors = 1, 1
		return "", u, p.Turn, true, ev.Type == TypeLLMRetry
	case ToolCall:
		u.ToolCalls = 1
		return "", u, p.Turn, true, ev.Type == TypeToolCall
	case AssistantMessage:
		if m := p.Usage; m != nil {
			u = messageUsage(*m)
		}
		return "", u, p.Turn, true, ev.Type == TypeAssistantMessage
	case AssistantUsage:
		return "", messageUsage(p.Usage), p.Turn, true, ev.Type == TypeAssistantUsage
	case ToolResult:
		failed := p.Error != nil
		for _, b := range p.Message.Content {
			failed = failed || (b.Type == llm.BlockToolResult && b.IsError) // the only blocks that carry isError
		}
		if failed {
			u.ToolErrors = 1
		}
		return "", u, p.Turn, true, ev.Type == TypeToolResult
	}
	return "", u, 0, false, false
}

func messageUsage(m llm.Usage) Usage {
	return Usage{InputTokens: int64(m.InputTokens), OutputTokens: int64(m.OutputTokens),
		CacheReadTokens: int64(m.CacheReadTokens), CacheMissTokens: int64(m.CacheMissTokens),
		ReasoningTokens: int64(m.ReasoningTokens)}
}

// TurnUsage is one turn's share of a run of events: its usage, and the times (epoch
// milliseconds) of its turn/start and turn/end when the run holds them (0 otherwise), with the
// end's reason kind.
type TurnUsage struct {
	Turn    int
	Usage   Usage
	StartMs int64
	EndMs   int64
	EndKind string
}

// UsageByTurn folds evs (in seq order) into the usage of each turn they touch, in order of
// first appearance.
func UsageByTurn(evs []Event) []TurnUsage {
	var out []TurnUsage
	for _, ev := range evs {
		endKind, u, turn, ok := eventUsage(ev)
		if !ok {
			continue
		}
		i := slices.IndexFunc(out, func(t TurnUsage) bool { return t.Turn == turn })
		if i < 0 {
			out = append(out, TurnUsage{Turn: turn})
			i = len(out) - 1
		}
		t := &out[i]
		t.Usage.Add(u)
		switch ev.Type {
		case TypeTurnStart:
			t.StartMs = ev.Time
		case TypeTurnEnd:
			t.EndMs, t.EndKind = ev.Time, endKind
		}
	}
	return out
}
