package openai

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/dshd/dshd/pkg/llm"
)

// assembler turns wire chunks into the chunk vocabulary of pkg/llm. Content block indexes
// count blocks in arrival order: a reasoning or text block stays open until a block of
// another kind starts; tool-call blocks, accumulated per wire tool index, stay open until the
// stream ends. At the end the open blocks end in index order, then usage, then finish, as the
// reference logs show. Not safe for concurrent use.
type assembler struct {
	out      []llm.Chunk
	blocks   int             // blocks started so far; the next block's index
	open     int             // index of the open text or reasoning block, -1 when none
	openType string          // its block type
	openText strings.Builder // its text so far
	calls    map[int]*toolCall
	order    []*toolCall // calls in block order
	finish   string      // wire finish_reason, "" until one is seen
	usage    *llm.Usage
	seen     chunkStrings // what the chunks repeat (decodeChunk)
}

type toolCall struct {
	block int
	id    string
	name  string
	args  strings.Builder
}

func newAssembler() *assembler {
	return &assembler{open: -1, calls: map[int]*toolCall{}}
}

// take returns the chunks produced since the last call and forgets them. The slice is valid until
// the next add: the caller copies the chunks.
func (a *assembler) take() []llm.Chunk {
	out := a.out
	a.out = a.out[:0]
	return out
}

// addData parses one SSE data payload and adds it. The usual shapes are decoded without
// reflection (decodeChunk); anything else by encoding/json, with the same result.
func (a *assembler) addData(data []byte) error {
	var c ChatChunk
	if decodeChunk(data, &c, &a.seen) {
		return a.add(c)
	}
	if err := json.Unmarshal(data, &c); err != nil {
		// The data stays out of the (tenant-visible) message; the logs get it through Err.
		e := llm.NewError(llm.CodeTransport, "malformed stream chunk: %v", err)
		e.Err = fmt.Errorf("%w (data %q)", err, clip(data, 120))
		return e
	}
	return a.add(c)
}

// add adds one parsed chunk. Only choice 0 is read (dshd never asks for n > 1).
func (a *assembler) add(c ChatChunk) error {
	if c.Error != nil {
		return apiError(0, *c.Error)
	}
	if c.Usage != nil {
		u := convertUsage(*c.Usage)
		a.usage = &u
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		a.addDelta(ch.Delta)
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			a.finish = *ch.FinishReason
		}
	}
	return nil
}

func (a *assembler) addDelta(d Delta) {
	if d.ReasoningContent != nil && *d.ReasoningContent != "" {
		a.addText(llm.BlockReasoning, *d.ReasoningContent)
	}
	if d.Content != nil && *d.Content != "" {
		a.addText(llm.BlockText, *d.Content)
	}
	for _, tc := range d.ToolCalls {
		a.addToolCall(tc)
	}
}

func (a *assembler) addText(blockType, text string) {
	if a.openType != blockType {
		a.closeOpen()
		a.open, a.openType = a.blocks, blockType
		a.blocks++
		a.out = append(a.out, llm.BlockStartChunk(a.open, blockType))
	}
	a.openText.WriteString(text)
	if blockType == llm.BlockReasoning {
		a.out = append(a.out, llm.ReasoningDeltaChunk(a.open, text))
	} else {
		a.out = append(a.out, llm.TextDeltaChunk(a.open, text))
	}
}

func (a *assembler) closeOpen() {
	if a.open < 0 {
		return
	}
	a.out = append(a.out, llm.BlockEndChunk(a.open, llm.Block{Type: a.openType, Text: a.openText.String()}))
	a.open, a.openType = -1, ""
	a.openText.Reset()
}

// addToolCall adds one tool-call delta.
func (a *assembler) addToolCall(tc ToolCall) {
	call := a.callFor(tc)
	if call.id == "" {
		call.id = tc.ID
	}
	if call.name == "" {
		call.name = tc.Function.Name
	}
	call.args.WriteString(tc.Function.Arguments)
	a.out = append(a.out, llm.ToolCallDeltaChunk(call.block, call.id, call.name, tc.Function.Arguments))
}

// callFor finds or starts the call a delta belongs to: by wire index, or, for a delta without
// an index (some servers omit it), the last call unless the delta carries a new id.
func (a *assembler) callFor(tc ToolCall) *toolCall {
	if tc.Index != nil {
		if c, ok := a.calls[*tc.Index]; ok {
			return c
		}
		c := a.startCall()
		a.calls[*tc.Index] = c
		return c
	}
	if n := len(a.order); n > 0 && (tc.ID == "" || tc.ID == a.order[n-1].id) {
		return a.order[n-1]
	}
	return a.startCall()
}

func (a *assembler) startCall() *toolCall {
	a.closeOpen()
	c := &toolCall{block: a.blocks}
	a.blocks++
	a.order = append(a.order, c)
	a.out = append(a.out, llm.BlockStartChunk(c.block, llm.BlockToolCall))
	return c
}

// finalize ends the stream: it ends the open blocks in index order and appends usage and
// finish. A stream without any block is EMPTY_RESPONSE; DeepSeek's
// insufficient_system_resource finish is SERVER; a complete tool call without a name is a
// malformed stream.
func (a *assembler) finalize() error {
	if a.blocks == 0 {
		return llm.NewError(llm.CodeEmptyResponse, "the model returned no content (finish reason %q)", a.finish)
	}
	kind, err := a.finishKind()
	if err != nil {
		return err
	}
	type ended struct {
		index int
		block llm.Block
	}
	var ends []ended
	if a.open >= 0 {
		ends = append(ends, ended{a.open, llm.Block{Type: a.openType, Text: a.openText.String()}})
		a.open = -1
	}
	for _, c := range a.order {
		if c.name == "" && kind != llm.FinishMaxTokens {
			return llm.NewError(llm.CodeTransport, "malformed stream: tool call %d has no function name", c.block)
		}
		if c.id == "" {
			c.id = fmt.Sprintf("call_%d", c.block)
		}
		ends = append(ends, ended{c.block, llm.ToolCallBlock(c.id, c.name, c.args.String())})
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i].index < ends[j].index })
	for _, e := range ends {
		a.out = append(a.out, llm.BlockEndChunk(e.index, e.block))
	}
	if a.usage != nil {
		a.out = append(a.out, llm.UsageChunk(*a.usage))
	}
	a.out = append(a.out, llm.FinishChunk(kind))
	return nil
}

func (a *assembler) finishKind() (string, error) {
	switch a.finish {
	case "length":
		return llm.FinishMaxTokens, nil
	case "insufficient_system_resource":
		return "", llm.NewError(llm.CodeServer, "the provider interrupted the response: insufficient system resource")
	}
	if len(a.order) > 0 {
		return llm.FinishToolCalls, nil
	}
	return llm.FinishStop, nil
}

func convertUsage(u Usage) llm.Usage {
	out := llm.Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
	switch {
	case u.PromptCacheHitTokens != nil:
		out.CacheReadTokens = *u.PromptCacheHitTokens
	case u.PromptTokensDetails != nil:
		out.CacheReadTokens = u.PromptTokensDetails.CachedTokens
	}
	if u.PromptCacheMissTokens != nil {
		out.CacheMissTokens = *u.PromptCacheMissTokens
	}
	if u.CompletionTokensDetails != nil {
		out.ReasoningTokens = u.CompletionTokensDetails.ReasoningTokens
	}
	return out
}

func clip(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
