package openai

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// chunkSamples are chunk data as providers send them, and shapes at the edges of what
// decodeChunk takes itself.
var chunkSamples = []string{
	`{"id":"chatcmpl-mock","object":"chat.completion.chunk","model":"mock","choices":[]}`,
	`{"id":"chatcmpl-mock","object":"chat.completion.chunk","model":"mock\n","choices":[]}`,
	"{\"model\":\"mock\n\"}", // after the escaped spelling of the same value: still invalid
	`{"id":"chatcmpl-mock","object":"chat.completion.chunk","model":"mock","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
	`{"id":"x","object":"chat.completion.chunk","created":1718345013,"model":"deepseek-chat","system_fingerprint":"fp_a49d71b8a1","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}]}`,
	`{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":"Hm"}}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":3,"id":"call_1","type":"function","function":{"name":"echo","arguments":""}}]}}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":3,"function":{"arguments":"{\"text\":\"step 1 call 1\"}"}}]}}]}`,
	`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":100,"completion_tokens":600,"prompt_cache_hit_tokens":8,"completion_tokens_details":{"reasoning_tokens":1}}}`,
	`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`,
	`{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":4,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":1,"accepted_prediction_tokens":0},"prompt_cache_hit_tokens":null,"prompt_cache_miss_tokens":5}}`,
	`{"usage":{"prompt_tokens_details":null,"completion_tokens_details":null,"prompt_tokens":null}}`,
	`{"error":{"message":"Rate limit reached","type":"rate_limit","code":429}}`,
	` { "choices" : [ { "index" : 0 , "delta" : { "content" : "a\n\"b\"\\\/\b\f\r\t\u00e9\u20ac\ud83d\ude00 <>&" } } ] } `,
	`{"choices":[{"index":0,"delta":{"content":"é€😀"}}]}`,
	`{"choices":null,"usage":null,"error":null,"id":null,"created":null}`,
	`{"choices":[{"index":null,"delta":null,"finish_reason":null}]}`,
	`{"choices":[{"delta":{"tool_calls":null,"content":null}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":null,"function":null}]}}]}`,
	`{"x":{"a":[1,-2.5e3,true,false,null,{"b":"c"}],"d":""},"choices":[]}`,
	`{}`,
	`{"choices":[{"index":-0,"delta":{}}]}`,
	// left to encoding/json:
	`{"Choices":[{"index":0,"delta":{"content":"x"}}]}`,
	`{"choices":[{"index":0,"delta":{"Content":"x"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"x","content":"y"}}]}`,
	`{"choices":[{"index":1.0}]}`,
	`{"choices":[{"index":1e2}]}`,
	`{"choices":[{"index":01}]}`,
	`{"choices":[{"index":12345678901234567890}]}`,
	`{"choices":[{"delta":{"content":"\ud800"}}]}`,
	`{"choices":[{"delta":{"content":"\udc00\ud800"}}]}`,
	"{\"choices\":[{\"delta\":{\"content\":\"\xff\"}}]}",
	"{\"choices\":[{\"delta\":{\"content\":\"a\tb\"}}]}",
	`{"choices":[{"delta":{"content":"x"}}]} x`,
	`{"choices":[{"delta":{"content":"x"}}],}`,
	`{"choices":[{"delta":{"content":5}}]}`,
	`{"usage":{"prompt_tokens":"x"}}`,
	`{"usage":{"Prompt_tokens":1}}`,
	`{"usage":{"prompt_tokens_details":{"Cached_tokens":1}}}`,
	`{"usage":{"prompt_tokens":1,"prompt_tokens":2}}`,
	`{"x":01}`,
	`{"x":[1,]}`,
	`{"\u0063hoices":[]}`,
	`null`,
	`[]`,
	`{"choices":`,
	``,
}

// TestDecodeChunkMatchesEncodingJSON: whatever decodeChunk decodes itself, encoding/json decodes
// without error to the same value.
func TestDecodeChunkMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	fast := 0
	var seen chunkStrings // one stream of all samples: what they repeat is kept
	for _, s := range chunkSamples {
		if checkDecodeChunk(t, []byte(s), &seen) {
			fast++
		}
	}
	if fast < 21 {
		t.Fatalf("decodeChunk decoded %d of the usual shapes itself, want 21", fast)
	}
}

// checkDecodeChunk compares decodeChunk with json.Unmarshal on data and reports whether
// decodeChunk decoded it.
func checkDecodeChunk(t *testing.T, data []byte, seen *chunkStrings) bool {
	t.Helper()
	var got, want ChatChunk
	if !decodeChunk(data, &got, seen) {
		return false
	}
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("%q: decodeChunk decoded what encoding/json refuses (%v)", data, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n got %#v\nwant %#v", data, got, want)
	}
	return true
}

func FuzzDecodeChunk(f *testing.F) {
	for _, s := range chunkSamples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// Once as a stream's first chunk, then after a chunk whose strings it may repeat.
		checkDecodeChunk(t, data, &chunkStrings{})
		seen := chunkStrings{id: "chatcmpl-mock", object: "chat.completion.chunk", model: "mock"}
		checkDecodeChunk(t, data, &seen)
		checkDecodeChunk(t, data, &seen)
	})
}

// TestParseLinesLongerThanTheBuffer: an event whose data line is many times the read buffer
// (a long text delta, long tool arguments) is read whole.
func TestParseLinesLongerThanTheBuffer(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("word ", 5*sseBufferSize/4)
	chunks, err := parse(sse(`{"choices":[{"index":0,"delta":{"content":"`+long+`"},"finish_reason":"stop"}]}`, "[DONE]"))
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) < 2 || chunks[1].Text != long {
		t.Fatalf("got %d chunks, text of %d bytes, want %d", len(chunks), len(chunks[1].Text), len(long))
	}
}
