package llm

import (
	"errors"
	"fmt"
	"io"
)

// BlockStartChunk opens content block index of type blockType.
func BlockStartChunk(index int, blockType string) Chunk {
	return Chunk{Type: ChunkBlockStart, Index: &index, BlockType: blockType}
}

// TextDeltaChunk appends text to the text block at index.
func TextDeltaChunk(index int, text string) Chunk {
	return Chunk{Type: ChunkTextDelta, Index: &index, Text: text}
}

// ReasoningDeltaChunk appends text to the reasoning block at index.
func ReasoningDeltaChunk(index int, text string) Chunk {
	return Chunk{Type: ChunkReasoningDelta, Index: &index, Text: text}
}

// ToolCallDeltaChunk appends argsDelta (possibly empty) to the tool-call block at index. Every
// delta repeats the call's id and name, as the reference logs do.
func ToolCallDeltaChunk(index int, id, name, argsDelta string) Chunk {
	return Chunk{Type: ChunkToolCallDelta, Index: &index, ID: id, Name: name, ArgumentsDelta: &argsDelta}
}

// BlockEndChunk closes the block at index, carrying the completed block.
func BlockEndChunk(index int, b Block) Chunk {
	return Chunk{Type: ChunkBlockEnd, Index: &index, Block: &b}
}

// UsageChunk reports the token usage of the call.
func UsageChunk(u Usage) Chunk { return Chunk{Type: ChunkUsage, Usage: &u} }

// FinishChunk ends a healthy stream with the given finish kind (FinishStop, ...).
func FinishChunk(kind string) Chunk {
	return Chunk{Type: ChunkFinish, Reason: &FinishReason{Kind: kind}}
}

// ErrorChunk ends a failed model call with finish kind error and the failure's facts.
func ErrorChunk(f Failure) Chunk {
	return Chunk{Type: ChunkFinish, Reason: &FinishReason{Kind: FinishError, Failure: &f}}
}

// Result is a stream read to its end by ReadAll.
type Result struct {
	Chunks []Chunk // every chunk received, in order
	Blocks []Block // the completed blocks of the block-end chunks, in block index order
	Usage  *Usage  // the last usage chunk, if any
	Finish string  // the finish kind, "" when the stream ended without a finish chunk
}

// ReadAll receives from s until io.EOF or an error. It returns what was received so far
// together with the error (nil on io.EOF). It does not close s.
func ReadAll(s Stream) (Result, error) {
	var res Result
	ends := map[int]Block{}
	maxIndex := -1
	for {
		c, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			res.Blocks = orderedBlocks(ends, maxIndex)
			return res, err
		}
		res.Chunks = append(res.Chunks, c)
		switch c.Type {
		case ChunkBlockEnd:
			if c.Index == nil || c.Block == nil {
				return res, fmt.Errorf("llm: block-end chunk without index or block")
			}
			ends[*c.Index] = *c.Block
			maxIndex = max(maxIndex, *c.Index)
		case ChunkUsage:
			res.Usage = c.Usage
		case ChunkFinish:
			if c.Reason != nil {
				res.Finish = c.Reason.Kind
			}
		}
	}
	res.Blocks = orderedBlocks(ends, maxIndex)
	return res, nil
}

func orderedBlocks(ends map[int]Block, maxIndex int) []Block {
	var out []Block
	for i := 0; i <= maxIndex; i++ {
		if b, ok := ends[i]; ok {
			out = append(out, b)
		}
	}
	return out
}
