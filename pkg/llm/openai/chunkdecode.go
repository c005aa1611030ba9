package openai

import (
	"bytes"
)

// decodeChunk decodes the data of one streamed event into c without reflection, for the shapes
// providers send: the keys of ChatChunk, ChunkChoice, Delta, ToolCall and FunctionCall spelled
// exactly, strings, integers and null where the types take them, and other keys with any valid
// value (skipped). error is decoded by encoding/json. It reports false when the data is
// anything else (a key in another case, a repeated key, a number that is not a plain integer, a
// string that is not valid UTF-8 or escapes a lone surrogate, trailing data, invalid JSON): the
// caller then decodes it with json.Unmarshal. When it reports true, c holds exactly what
// json.Unmarshal would have decoded into a zero ChatChunk, and json.Unmarshal would not have
// failed (FuzzDecodeChunk). The scanner is chunkscan.go.
//
// seen holds the id, object and model of the stream's last chunk, which every chunk repeats: the
// same values are not allocated again.
func decodeChunk(data []byte, c *ChatChunk, seen *chunkStrings) bool {
	d := chunkDecoder{in: data, seen: seen}
	d.ws()
	if !d.chunk(c) {
		return false
	}
	d.ws()
	return d.pos == len(d.in)
}

// chunkStrings are the strings a stream's chunks repeat.
type chunkStrings struct{ id, object, model string }

// repeated decodes a string or null into *s (null leaves it), reusing *last when the string is
// spelled the same, and remembering it there when it has no escapes.
func (d *chunkDecoder) repeated(s, last *string) bool {
	if d.null() {
		return true
	}
	if d.pos < len(d.in) && d.in[d.pos] == '"' {
		if end := bytes.IndexByte(d.in[d.pos+1:], '"'); end >= 0 {
			raw := d.in[d.pos+1 : d.pos+1+end]
			if string(raw) == *last && bytes.IndexByte(raw, '\\') < 0 {
				d.pos += end + 2
				*s = *last
				return true
			}
		}
	}
	start := d.pos
	v, ok := d.str()
	*s = v
	if ok && d.pos-start == len(v)+2 {
		*last = v // only a string without escapes: its spelling is then its value, validated
	}
	return ok
}

func (d *chunkDecoder) chunk(c *ChatChunk) bool {
	return d.object(func(key []byte) (uint, bool) {
		switch string(key) {
		case "id":
			return 1 << 0, d.repeated(&c.ID, &d.seen.id)
		case "object":
			return 1 << 1, d.repeated(&c.Object, &d.seen.object)
		case "created":
			if d.null() {
				return 1 << 2, true
			}
			v, ok := d.integer()
			c.Created = v
			return 1 << 2, ok
		case "model":
			return 1 << 3, d.repeated(&c.Model, &d.seen.model)
		case "choices":
			return 1 << 4, d.choices(&c.Choices)
		case "usage":
			return 1 << 5, d.usage(&c.Usage)
		case "error":
			return 1 << 6, d.rawInto(&c.Error)
		}
		return 0, d.skip(key, "id", "object", "created", "model", "choices", "usage", "error")
	})
}

func (d *chunkDecoder) choices(out *[]ChunkChoice) bool {
	if d.null() {
		*out = nil
		return true
	}
	list := make([]ChunkChoice, 0, 1)
	ok := d.array(func() bool {
		var ch ChunkChoice
		if !d.choice(&ch) {
			return false
		}
		list = append(list, ch)
		return true
	})
	*out = list
	return ok
}

func (d *chunkDecoder) choice(ch *ChunkChoice) bool {
	return d.object(func(key []byte) (uint, bool) {
		switch string(key) {
		case "index":
			return 1 << 0, d.intInto(&ch.Index)
		case "delta":
			if d.null() {
				return 1 << 1, true
			}
			return 1 << 1, d.delta(&ch.Delta)
		case "finish_reason":
			return 1 << 2, d.stringPtr(&ch.FinishReason)
		}
		return 0, d.skip(key, "index", "delta", "finish_reason")
	})
}

func (d *chunkDecoder) delta(dl *Delta) bool {
	return d.object(func(key []byte) (uint, bool) {
		switch string(key) {
		case "role":
			return 1 << 0, d.stringInto(&dl.Role)
		case "content":
			return 1 << 1, d.stringPtr(&dl.Content)
		case "reasoning_content":
			return 1 << 2, d.stringPtr(&dl.ReasoningContent)
		case "tool_calls":
			return 1 << 3, d.toolCalls(&dl.ToolCalls)
		}
		return 0, d.skip(key, "role", "content", "reasoning_content", "tool_calls")
	})
}

func (d *chunkDecoder) toolCalls(out *[]ToolCall) bool {
	if d.null() {
		*out = nil
		return true
	}
	list := make([]ToolCall, 0, 1)
	ok := d.array(func() bool {
		var tc ToolCall
		if !d.toolCall(&tc) {
			return false
		}
		list = append(list, tc)
		return true
	})
	*out = list
	return ok
}

func (d *chunkDecoder) toolCall(tc *ToolCall) bool {
	return d.object(func(key []byte) (uint, bool) {
		switch string(key) {
		case "index":
			if d.null() {
				tc.Index = nil
				return 1 << 0, true
			}
			v, ok := d.integer()
			n := int(v)
			tc.Index = &n
			return 1 << 0, ok
		case "id":
			return 1 << 1, d.stringInto(&tc.ID)
		case "type":
			return 1 << 2, d.stringInto(&tc.Type)
		case "function":
			if d.null() {
				return 1 << 3, true
			}
			return 1 << 3, d.function(&tc.Function)
		}
		return 0, d.skip(key, "index", "id", "type", "function")
	})
}

func (d *chunkDecoder) function(f *FunctionCall) bool {
	return d.object(func(key []byte) (uint, bool) {
		switch string(key) {
		case "name":
			return 1 << 0, d.stringInto(&f.Name)
		case "arguments":
			return 1 << 1, d.stringInto(&f.Arguments)
		}
		return 0, d.skip(key, "name", "arguments")
	})
}

func (d *chunkDecoder) usage(out **Usage) bool {
	if d.null() {
		*out = nil
		return true
	}
	u := &Usage{}
	*out = u
	return d.object(func(key []byte) (uint, bool) {
		switch string(key) {
		case "prompt_tokens":
			return 1 << 0, d.intInto(&u.PromptTokens)
		case "completion_tokens":
			return 1 << 1, d.intInto(&u.CompletionTokens)
		case "total_tokens":
			return 1 << 2, d.intInto(&u.TotalTokens)
		case "prompt_cache_hit_tokens":
			return 1 << 3, d.intPtr(&u.PromptCacheHitTokens)
		case "prompt_cache_miss_tokens":
			return 1 << 4, d.intPtr(&u.PromptCacheMissTokens)
		case "prompt_tokens_details":
			if d.null() {
				u.PromptTokensDetails = nil
				return 1 << 5, true
			}
			u.PromptTokensDetails = &PromptTokensDetails{}
			return 1 << 5, d.object(func(key []byte) (uint, bool) {
				if string(key) == "cached_tokens" {
					return 1, d.intInto(&u.PromptTokensDetails.CachedTokens)
				}
				return 0, d.skip(key, "cached_tokens")
			})
		case "completion_tokens_details":
			if d.null() {
				u.CompletionTokensDetails = nil
				return 1 << 6, true
			}
			u.CompletionTokensDetails = &CompletionTokensDetails{}
			return 1 << 6, d.object(func(key []byte) (uint, bool) {
				if string(key) == "reasoning_tokens" {
					return 1, d.intInto(&u.CompletionTokensDetails.ReasoningTokens)
				}
				return 0, d.skip(key, "reasoning_tokens")
			})
		}
		return 0, d.skip(key, "prompt_tokens", "completion_tokens", "total_tokens", "prompt_cache_hit_tokens",
			"prompt_cache_miss_tokens", "prompt_tokens_details", "completion_tokens_details")
	})
}

// intPtr decodes an integer into a new *int, or null into nil.
func (d *chunkDecoder) intPtr(n **int) bool {
	if d.null() {
		*n = nil
		return true
	}
	v, ok := d.integer()
	i := int(v)
	*n = &i
	return ok
}
