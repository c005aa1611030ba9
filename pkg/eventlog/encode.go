package eventlog

import (
	"strconv"

	"github.com/dshd/dshd/pkg/llm"
)

// appendPayload appends the JSON of the payload kinds a turn writes most (chunks, calls, results,
// messages, step and turn boundaries, splices, request headers), written without reflection and
// byte for byte as marshalPayload writes them (FuzzAppendPayload). It reports false for any other
// payload, and for one holding a message's replay state, a result's file mutations, a float (a
// temperature), JSON of its own that is not lossless, or an unknown block type: those are left to
// marshalPayload and the lossless check. What it writes is compact, lossless JSON: ints, booleans
// and strings (invalid UTF-8 replaced, as encoding/json replaces it) by construction, no repeated
// keys, and embedded JSON (tool parameters, a result's meta) that passed the lossless check.
func appendPayload(b []byte, p Payload) ([]byte, bool) {
	e := payloadWriter{b: b, ok: true}
	switch p := p.(type) {
	case AssistantChunk:
		e.turnStep(p.Turn, p.Step)
		e.key("chunk")
		e.chunk(p.Chunk)
	case StepStart:
		e.turnStep(p.Turn, p.Step)
	case StepEnd:
		e.turnStep(p.Turn, p.Step)
	case TurnStart:
		e.b = append(e.b, `{"turn":`...)
		e.b = strconv.AppendInt(e.b, int64(p.Turn), 10)
	case ToolCall:
		e.turnStep(p.Turn, p.Step)
		e.str("callId", p.CallID)
		e.str("name", p.Name)
		e.str("arguments", p.Arguments)
	case ToolResult:
		if len(p.Mutations) > 0 {
			return b, false
		}
		e.turnStep(p.Turn, p.Step)
		e.key("message")
		e.message(p.Message)
		if p.Error != nil {
			e.b = append(e.b, `,"error":{"name":`...)
			e.b = llm.AppendJSONString(e.b, p.Error.Name, false)
			e.str("code", p.Error.Code)
			e.b = append(e.b, '}')
		}
		if len(p.Meta) > 0 {
			e.key("meta")
			e.raw(p.Meta)
		}
	case AssistantMessage:
		e.turnStep(p.Turn, p.Step)
		e.key("message")
		e.message(p.Message)
		if p.Usage != nil {
			e.key("usage")
			e.usage(*p.Usage)
		}
		if p.Interrupted {
			e.b = append(e.b, `,"interrupted":true`...)
		}
	case UserMessage:
		e.b = append(e.b, '{')
		e.messageFields(p.Message)
	case TurnEnd:
		e.b = append(e.b, `{"turn":`...)
		e.b = strconv.AppendInt(e.b, int64(p.Turn), 10)
		e.key("reason")
		e.reason(p.Reason)
	case InboxSpliced:
		e.b = append(e.b, `{"target":`...)
		e.b = llm.AppendJSONString(e.b, p.Target, false)
		e.int("start", p.Start)
		if p.RemovedCount != nil {
			e.int("removedCount", *p.RemovedCount)
		}
		e.key("inserted")
		e.messages(p.Inserted)
		if p.Outcome != "" {
			e.str("outcome", p.Outcome)
		}
	case RequestHeader:
		e.b = append(e.b, `{"header":`...)
		e.header(p.Header)
		e.str("reason", p.Reason)
	case RequestContext:
		e.b = append(e.b, `{"provider":`...)
		e.b = llm.AppendJSONString(e.b, p.Provider, false)
		e.str("model", p.Model)
		if p.ContextWindow != 0 {
			e.int("contextWindow", p.ContextWindow)
		}
	default:
		return b, false
	}
	if !e.ok {
		return b, false
	}
	return append(e.b, '}'), true
}

// payloadWriter writes one payload's JSON; ok turns false on anything appendPayload leaves to
// encoding/json.
type payloadWriter struct {
	b  []byte
	ok bool
}

func (e *payloadWriter) turnStep(turn, step int) {
	e.b = append(e.b, `{"turn":`...)
	e.b = strconv.AppendInt(e.b, int64(turn), 10)
	e.int("step", step)
}

// key writes `,"k":`; every object this writer writes starts with a fixed first key.
func (e *payloadWriter) key(k string) {
	e.b = append(e.b, ',', '"')
	e.b = append(e.b, k...)
	e.b = append(e.b, '"', ':')
}

func (e *payloadWriter) str(k, v string) {
	e.key(k)
	e.b = llm.AppendJSONString(e.b, v, false)
}

func (e *payloadWriter) int(k string, v int) {
	e.key(k)
	e.b = strconv.AppendInt(e.b, int64(v), 10)
}

func (e *payloadWriter) messages(ms []llm.Message) {
	if ms == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, '[')
	for i, m := range ms {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.message(m)
	}
	e.b = append(e.b, ']')
}

func (e *payloadWriter) message(m llm.Message) {
	e.b = append(e.b, '{')
	e.messageFields(m)
	e.b = append(e.b, '}')
}

// messageFields writes the fields of m after an opening brace.
func (e *payloadWriter) messageFields(m llm.Message) {
	e.b = append(e.b, `"id":`...)
	e.b = llm.AppendJSONString(e.b, m.ID, false)
	e.str("role", m.Role)
	e.key("content")
	e.blocks(m.Content)
	e.key("source")
	e.source(m.Source)
}

func (e *payloadWriter) blocks(bs []llm.Block) {
	if bs == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, '[')
	for i, bl := range bs {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.block(bl)
	}
	e.b = append(e.b, ']')
}

func (e *payloadWriter) block(bl llm.Block) {
	out, err := bl.AppendJSON(e.b)
	if err != nil {
		e.ok = false
		return
	}
	e.b = out
}

func (e *payloadWriter) source(s llm.Source) {
	if len(s.ReplayState) > 0 {
		e.ok = false
		return
	}
	e.b = append(e.b, `{"kind":`...)
	e.b = llm.AppendJSONString(e.b, s.Kind, false)
	for _, f := range [...]struct{ k, v string }{{"provider", s.Provider}, {"model", s.Model}} {
		if f.v != "" {
			e.str(f.k, f.v)
		}
	}
	for _, f := range [...]struct{ k, v string }{{"callId", s.CallID}, {"plugin", s.Plugin}, {"form", s.Form}} {
		if f.v != "" {
			e.str(f.k, f.v)
		}
	}
	if len(s.Sections) > 0 {
		e.key("sections")
		e.b = append(e.b, '[')
		for i, sec := range s.Sections {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.b = llm.AppendJSONString(e.b, sec, false)
		}
		e.b = append(e.b, ']')
	}
	e.b = append(e.b, '}')
}

func (e *payloadWriter) usage(u llm.Usage) {
	e.b = append(e.b, `{"inputTokens":`...)
	e.b = strconv.AppendInt(e.b, int64(u.InputTokens), 10)
	e.int("outputTokens", u.OutputTokens)
	for _, f := range [...]struct {
		k string
		v int
	}{{"cacheReadTokens", u.CacheReadTokens}, {"cacheMissTokens", u.CacheMissTokens}, {"reasoningTokens", u.ReasoningTokens}} {
		if f.v != 0 {
			e.int(f.k, f.v)
		}
	}
	if u.Estimated {
		e.b = append(e.b, `,"estimated":true`...)
	}
	e.b = append(e.b, '}')
}

func (e *payloadWriter) chunk(c *llm.Chunk) {
	if c == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, `{"type":`...)
	e.b = llm.AppendJSONString(e.b, c.Type, false)
	if c.Index != nil {
		e.int("index", *c.Index)
	}
	for _, f := range [...]struct{ k, v string }{{"blockType", c.BlockType}, {"text", c.Text}, {"id", c.ID}, {"name", c.Name}} {
		if f.v != "" {
			e.str(f.k, f.v)
		}
	}
	if c.ArgumentsDelta != nil {
		e.str("argumentsDelta", *c.ArgumentsDelta)
	}
	if c.Block != nil {
		e.key("block")
		e.block(*c.Block)
	}
	if c.Usage != nil {
		e.key("usage")
		e.usage(*c.Usage)
	}
	if r := c.Reason; r != nil {
		e.key("reason")
		e.b = append(e.b, `{"kind":`...)
		e.b = llm.AppendJSONString(e.b, r.Kind, false)
		if f := r.Failure; f != nil {
			e.key("failure")
			e.failure(f.Message, f.Code, f.Status)
		}
		e.b = append(e.b, '}')
	}
	e.b = append(e.b, '}')
}

// failure writes {message, code, status?}, the shape of llm.Failure and TurnError.
func (e *payloadWriter) failure(message, code string, status int) {
	e.b = append(e.b, `{"message":`...)
	e.b = llm.AppendJSONString(e.b, message, false)
	e.str("code", code)
	if status != 0 {
		e.int("status", status)
	}
	e.b = append(e.b, '}')
}

func (e *payloadWriter) reason(r TurnReason) {
	e.b = append(e.b, `{"kind":`...)
	e.b = llm.AppendJSONString(e.b, r.Kind, false)
	if c := r.Reason; c != nil {
		e.key("reason")
		e.b = append(e.b, `{"kind":`...)
		e.b = llm.AppendJSONString(e.b, c.Kind, false)
		if c.Reason != "" {
			e.str("reason", c.Reason)
		}
		e.b = append(e.b, '}')
	}
	if er := r.Error; er != nil {
		e.key("error")
		e.failure(er.Message, er.Code, er.Status)
	}
	e.b = append(e.b, '}')
}
