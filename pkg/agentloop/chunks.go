package agentloop

import (
	"sort"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

// chunkStager stages the `assistant/chunk` events of one model call and assembles the message.
// Adjacent deltas of the same block are merged into one chunk event while that event is still
// pending, so a fast stream costs a handful of events per batch instead of one per token.
type chunkStager struct {
	r          *Runner
	turn, step int
	cites      []*handle
	last       *llm.Chunk // the last staged chunk, mergeable while lastFlush == r.w.flushes
	lastFlush  int

	blocks  map[int]llm.Block // completed blocks by index (block-end)
	text    map[int]*partialBlock
	usage   *llm.Usage
	finish  string
	failure *llm.Failure // of an error or abort finish chunk

	outBytes  int // text, reasoning and argument bytes streamed
	toolCalls int // tool-call blocks started

	started time.Time // when the attempt was sent (metrics)
	first   bool      // a chunk was received (time to first chunk recorded)
}

// checkLimits reports a response that went past the runner's output bounds.
func (cs *chunkStager) checkLimits(c llm.Chunk) error {
	cs.outBytes += len(c.Text)
	if c.ArgumentsDelta != nil {
		cs.outBytes += len(*c.ArgumentsDelta)
	}
	if c.Type == llm.ChunkBlockStart && c.BlockType == llm.BlockToolCall {
		cs.toolCalls++
	}
	switch {
	case cs.outBytes > cs.r.cfg.MaxOutputBytes:
		return llm.NewError(llm.CodeServer, "the model's response is larger than the limit of %d bytes", cs.r.cfg.MaxOutputBytes)
	case cs.toolCalls > cs.r.cfg.MaxToolCalls:
		return llm.NewError(llm.CodeServer, "the model's response has more than %d tool calls", cs.r.cfg.MaxToolCalls)
	}
	return nil
}

type partialBlock struct {
	typ  string
	text []byte
}

func (cs *chunkStager) push(c llm.Chunk) {
	cs.assemble(c)
	if cs.merge(c) {
		return
	}
	cp := c
	cs.last, cs.lastFlush = &cp, cs.r.w.flushes
	h := cs.r.w.stage(staged{typ: eventlog.TypeAssistantChunk, size: 64 + len(c.Text),
		data: eventlog.AssistantChunk{Turn: cs.turn, Step: cs.step, Chunk: &cp}})
	cs.cites = append(cs.cites, h)
}

// merge folds c into the last staged chunk when both are deltas of the same block and that
// chunk has not been written yet.
func (cs *chunkStager) merge(c llm.Chunk) bool {
	l := cs.last
	if l == nil || cs.lastFlush != cs.r.w.flushes || l.Type != c.Type || l.Index == nil || c.Index == nil || *l.Index != *c.Index {
		return false
	}
	switch c.Type {
	case llm.ChunkTextDelta, llm.ChunkReasoningDelta:
		l.Text += c.Text
		cs.r.w.size += len(c.Text)
		return true
	case llm.ChunkToolCallDelta:
		if l.ID != c.ID || l.Name != c.Name || l.ArgumentsDelta == nil || c.ArgumentsDelta == nil {
			return false
		}
		s := *l.ArgumentsDelta + *c.ArgumentsDelta
		l.ArgumentsDelta = &s
		cs.r.w.size += len(*c.ArgumentsDelta)
		return true
	}
	return false
}

func (cs *chunkStager) assemble(c llm.Chunk) {
	if cs.blocks == nil {
		cs.blocks, cs.text = map[int]llm.Block{}, map[int]*partialBlock{}
	}
	switch c.Type {
	case llm.ChunkBlockStart:
		if c.Index != nil {
			cs.text[*c.Index] = &partialBlock{typ: c.BlockType}
		}
	case llm.ChunkTextDelta, llm.ChunkReasoningDelta:
		if c.Index != nil {
			p := cs.text[*c.Index]
			if p == nil {
				typ := llm.BlockText
				if c.Type == llm.ChunkReasoningDelta {
					typ = llm.BlockReasoning
				}
				p = &partialBlock{typ: typ}
				cs.text[*c.Index] = p
			}
			p.text = append(p.text, c.Text...)
		}
	case llm.ChunkBlockEnd:
		if c.Index != nil && c.Block != nil {
			cs.blocks[*c.Index] = *c.Block
		}
	case llm.ChunkUsage:
		cs.usage = c.Usage
	case llm.ChunkFinish:
		if c.Reason != nil {
			cs.finish, cs.failure = c.Reason.Kind, c.Reason.Failure
		}
	}
}

// content returns the completed blocks in index order.
func (cs *chunkStager) content() []llm.Block {
	idx := make([]int, 0, len(cs.blocks))
	for i := range cs.blocks {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	out := make([]llm.Block, 0, len(idx))
	for _, i := range idx {
		out = append(out, cs.blocks[i])
	}
	return out
}

// partial returns the text and reasoning streamed so far that is not just whitespace, in index
// order; tool calls are dropped (LOOP-4).
func (cs *chunkStager) partial() []llm.Block {
	idx := make([]int, 0, len(cs.text))
	for i := range cs.text {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var out []llm.Block
	for _, i := range idx {
		p := cs.text[i]
		if (p.typ == llm.BlockText || p.typ == llm.BlockReasoning) && !blank(string(p.text)) {
			out = append(out, llm.Block{Type: p.typ, Text: string(p.text)})
		}
	}
	return out
}
