package scripted

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/dshd/dshd/pkg/llm"
)

// FailMalformed is the fail: code that makes mockllm send a malformed chunk; in process it is a
// TRANSPORT failure.
const FailMalformed = "MALFORMED"

// Plan is the scripted model's response to one request: the chunks of a successful answer
// and how to fail instead, if the script says so.
type Plan struct {
	Script Script
	Chunks []llm.Chunk // the whole answer, ending with usage and finish
	Steps  int         // tool steps taken since the script message
	Result int         // tool results seen since the script message
}

// Respond computes the plan for a request. It is a pure function of the history: the script
// is the last user-authored message (source kind user; failing that, the last user message
// that is not a tool result), steps are the assistant messages with tool calls after it and
// results the tool-result blocks after it. Tool call ids are call_<A>_<n>, where A is one more
// than the number of assistant messages in the whole history, so they never repeat within
// one session.
func Respond(req llm.Request) Plan {
	at := scriptIndex(req.Messages)
	var p Plan
	if at >= 0 {
		p.Script, _ = Parse(req.Messages[at].Text())
	} else {
		p.Script, _ = Parse("")
	}
	assistants := 0
	for i, m := range req.Messages {
		if m.Role == llm.RoleAssistant {
			assistants++
		}
		if i <= at {
			continue
		}
		if m.Role == llm.RoleAssistant && len(m.ToolCalls()) > 0 {
			p.Steps++
		}
		for _, b := range m.Content {
			if b.Type == llm.BlockToolResult {
				p.Result++
			}
		}
	}
	b := builder{pieces: p.Script.Chunks}
	b.answer(p, assistants+1)
	b.finish(req)
	p.Chunks = b.out
	return p
}

func scriptIndex(msgs []llm.Message) int {
	fallback := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Role != llm.RoleUser {
			continue
		}
		if m.Source.Kind == llm.SourceUser {
			return i
		}
		if fallback < 0 && m.Source.Kind != llm.SourceTool && m.Text() != "" {
			fallback = i
		}
	}
	return fallback
}

// RequestKey identifies a request for counting attempts: equal histories give equal keys.
func RequestKey(req llm.Request) string {
	data, _ := json.Marshal(req.Messages)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16])
}

// builder appends chunks with the block rules of the OpenAI adapter, so that the in-process
// model and mockllm behind the client give the same sequence: a text or reasoning block ends
// when the next block starts, tool-call blocks end together at the end.
type builder struct {
	out    []llm.Chunk
	pieces int // Script.Chunks
	next   int
	open   *llm.Block
	openAt int
	calls  []llm.Block
	deltas int
	cut    bool // finish with max-tokens
}

func (b *builder) answer(p Plan, assistantNo int) {
	s := p.Script
	if s.Reasoning != "" {
		b.text(llm.BlockReasoning, s.Reasoning)
	}
	switch {
	case s.MaxTokens:
		b.cut = true
		b.text(llm.BlockText, "This answer is cut off")
		b.call(fmt.Sprintf("call_%d_1", assistantNo), s.Tool, `{"text":"cut off mid-arg`)
	case s.Tools > 0 && p.Steps < s.Steps:
		for n := 1; n <= s.Tools; n++ {
			args := s.Args
			if args == "" {
				args = fmt.Sprintf(`{"text":"step %d call %d"}`, p.Steps+1, n)
			}
			b.call(fmt.Sprintf("call_%d_%d", assistantNo, n), s.Tool, args)
		}
	default:
		say := s.Say
		if say == "" {
			say = fmt.Sprintf("Done after %d steps and %d tool results.", p.Steps, p.Result)
		}
		b.text(llm.BlockText, say)
	}
}

func (b *builder) text(blockType, text string) {
	b.closeOpen()
	b.open, b.openAt = &llm.Block{Type: blockType, Text: text}, b.next
	b.out = append(b.out, llm.BlockStartChunk(b.next, blockType))
	for _, piece := range b.split(text, false) {
		if blockType == llm.BlockReasoning {
			b.out = append(b.out, llm.ReasoningDeltaChunk(b.next, piece))
		} else {
			b.out = append(b.out, llm.TextDeltaChunk(b.next, piece))
		}
		b.deltas++
	}
	b.next++
}

func (b *builder) call(id, name, args string) {
	b.closeOpen()
	b.calls = append(b.calls, llm.ToolCallBlock(id, name, args))
	b.out = append(b.out, llm.BlockStartChunk(b.next, llm.BlockToolCall))
	b.out = append(b.out, llm.ToolCallDeltaChunk(b.next, id, name, ""))
	for _, piece := range b.split(args, true) {
		b.out = append(b.out, llm.ToolCallDeltaChunk(b.next, id, name, piece))
		b.deltas++
	}
	b.next++
}

func (b *builder) closeOpen() {
	if b.open != nil {
		b.out = append(b.out, llm.BlockEndChunk(b.openAt, *b.open))
		b.open = nil
	}
}

func (b *builder) finish(req llm.Request) {
	b.closeOpen()
	first := b.next - len(b.calls)
	for i, c := range b.calls {
		b.out = append(b.out, llm.BlockEndChunk(first+i, c))
	}
	in := estimateTokens(req.System, req.Messages)
	u := llm.Usage{InputTokens: in, OutputTokens: b.deltas}
	if len(req.Messages) > 1 {
		u.CacheReadTokens = estimateTokens(req.System, req.Messages[:len(req.Messages)-1])
		u.CacheMissTokens = in - u.CacheReadTokens
	}
	b.out = append(b.out, llm.UsageChunk(u))
	kind := llm.FinishStop
	switch {
	case b.cut:
		kind = llm.FinishMaxTokens
	case len(b.calls) > 0:
		kind = llm.FinishToolCalls
	}
	b.out = append(b.out, llm.FinishChunk(kind))
}

// split cuts s into deltas: into about b.pieces pieces when set, else text before each space
// and arguments in 8-byte pieces, never inside a UTF-8 sequence.
func (b *builder) split(s string, args bool) []string {
	size := 8
	switch {
	case b.pieces > 0:
		size = max(1, (len(s)+b.pieces-1)/b.pieces)
	case !args:
		return splitWords(s)
	}
	var out []string
	for len(s) > 0 {
		n := min(size, len(s))
		for n < len(s) && !utf8.RuneStart(s[n]) {
			n++
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

func splitWords(s string) []string {
	var out []string
	for len(s) > 0 {
		i := strings.IndexByte(s[1:], ' ')
		if i < 0 {
			return append(out, s)
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// estimateTokens counts words as a stand-in for tokens, deterministically.
func estimateTokens(system string, msgs []llm.Message) int {
	n := len(strings.Fields(system))
	for _, m := range msgs {
		n += blockWords(m.Content)
	}
	return n
}

func blockWords(blocks []llm.Block) int {
	n := 0
	for _, b := range blocks {
		n += len(strings.Fields(b.Text)) + len(strings.Fields(b.Arguments)) + blockWords(b.Content)
		if b.Type == llm.BlockToolCall {
			n++
		}
	}
	return n
}
