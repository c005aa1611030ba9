package eventlog_test

import (
	"fmt"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

// toolStepBatch is the batch a step of 16 parallel echo calls writes (as with the mock model's
// `tools:16`): the streamed chunks, the assistant message, the calls and their results.
func toolStepBatch() []eventlog.NewEvent {
	const turn, step = 1, 1
	var evs []eventlog.NewEvent
	chunk := func(c llm.Chunk) {
		evs = append(evs, eventlog.Of(eventlog.AssistantChunk{Turn: turn, Step: step, Chunk: &c}))
	}
	var blocks []llm.Block
	for i := range 16 {
		id, args := fmt.Sprintf("call_%d", i), fmt.Sprintf(`{"text":"step 1 call %d"}`, i)
		chunk(llm.BlockStartChunk(i, llm.BlockToolCall))
		for j := 0; j < len(args); j += 8 {
			chunk(llm.ToolCallDeltaChunk(i, id, "echo", args[j:min(j+8, len(args))]))
		}
		chunk(llm.BlockEndChunk(i, llm.ToolCallBlock(id, "echo", args)))
		blocks = append(blocks, llm.ToolCallBlock(id, "echo", args))
	}
	chunk(llm.UsageChunk(llm.Usage{InputTokens: 900, OutputTokens: 120}))
	chunk(llm.FinishChunk(llm.FinishToolCalls))
	sources := make([]int64, len(evs))
	for i := range sources {
		sources[i] = int64(i)
	}
	evs = append(evs, eventlog.SurfaceEvent(eventlog.AssistantMessage{Turn: turn, Step: step,
		Message: llm.Message{ID: "m1", Role: llm.RoleAssistant, Content: blocks,
			Source: llm.Source{Kind: llm.SourceModel, Provider: "openai", Model: "mock"}},
		Usage: &llm.Usage{InputTokens: 900, OutputTokens: 120}}, sources...))
	for _, b := range blocks {
		evs = append(evs, eventlog.Of(eventlog.ToolCall{Turn: turn, Step: step, CallID: b.ID, Name: b.Name, Arguments: b.Arguments}))
	}
	for i, b := range blocks {
		msg := llm.NewToolResultMessage(fmt.Sprintf("r%d", i), b.ID, []llm.Block{llm.TextBlock(fmt.Sprintf("step 1 call %d", i))}, false)
		evs = append(evs, eventlog.SurfaceEvent(eventlog.ToolResult{Turn: turn, Step: step, Message: msg}))
	}
	return append(evs, eventlog.Of(eventlog.StepEnd{Turn: turn, Step: step}))
}

// BenchmarkPrepare validates and encodes the batch of a step of 16 tool calls, as every append
// of the runner's journal does.
func BenchmarkPrepare(b *testing.B) {
	batch := toolStepBatch()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := eventlog.Prepare(batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(batch)), "ns/event")
}
