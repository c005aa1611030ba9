package eventlog

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
)

// FuzzLosslessJSON: what losslessJSON accepts is valid JSON, and it returns exactly its compact
// form, in a slice of its own.
func FuzzLosslessJSON(f *testing.F) {
	for _, s := range []string{
		`{"turn":1}`, " { \"a\" : [ 1 , 2.5e3 , \"x\\n\" ] , \"b\" : null }\n", `{"a":1,"a":2}`,
		`{"a":1,"\u0061":2}`, `{"a":-0}`, `{"s":"\ud83d\ude00"}`, `{"s":"\ud800"}`, `[1,{"k":{}}]`,
		`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k1":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := losslessJSON(b)
		if err != nil {
			return
		}
		if !json.Valid(b) {
			t.Fatalf("accepted invalid JSON %q", b)
		}
		var want bytes.Buffer
		if err := json.Compact(&want, b); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, want.Bytes()) {
			t.Fatalf("%q: got %q, want %q", b, out, want.Bytes())
		}
		if len(out) > 0 && &out[0] == &b[0] {
			t.Fatal("the result shares the input's bytes")
		}
	})
}

// TestLosslessJSONDuplicateKeysInLargeObjects: the duplicate check holds past the objects it
// compares key by key.
func TestLosslessJSONDuplicateKeysInLargeObjects(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	b.WriteString("{")
	for i := range 40 {
		b.WriteString(`"k` + string(rune('a'+i%26)) + string(rune('a'+i/26)) + `":1,`)
	}
	ok := b.String() + `"z":1}`
	if _, err := losslessJSON([]byte(ok)); err != nil {
		t.Fatalf("40 distinct keys refused: %v", err)
	}
	for _, dup := range []string{`"kaa":2}`, `"kzа":2,"kzа":3}`, `"k\u0061a":2}`} {
		if _, err := losslessJSON([]byte(b.String() + dup)); err == nil {
			t.Fatalf("duplicate %s accepted", dup)
		}
	}
}

// payloadSamples returns payloads of every kind appendPayload writes, with every optional part
// present and absent, holding s and n where strings and numbers go.
func payloadSamples(s string, n int) []Payload {
	idx, args := n, s
	blocks := []llm.Block{llm.TextBlock(s), {Type: llm.BlockReasoning, Text: s, Signature: s}, llm.ToolCallBlock(s, s, s),
		{Type: llm.BlockToolResult, ToolCallID: s, Content: []llm.Block{llm.TextBlock(s)}, IsError: true},
		{Type: llm.BlockImage, MediaType: s, Data: s}}
	full := llm.Message{ID: s, Role: s, Content: blocks, Source: llm.Source{Kind: s, Provider: s, Model: s, CallID: s, Plugin: s, Form: s, Sections: []string{s, s}}}
	bare := llm.Message{ID: s, Source: llm.Source{Kind: s}}
	empty := llm.Message{ID: s, Content: []llm.Block{}, Source: llm.Source{Kind: s, Sections: []string{}}}
	usage := llm.Usage{InputTokens: n, OutputTokens: -n, CacheReadTokens: n, CacheMissTokens: n, ReasoningTokens: n, Estimated: true}
	block := llm.TextBlock(s)
	chunks := []*llm.Chunk{nil, {Type: s}, {Type: s, Index: &idx, BlockType: s, Text: s, ID: s, Name: s, ArgumentsDelta: &args,
		Block: &block, Usage: &usage, Reason: &llm.FinishReason{Kind: s, Failure: &llm.Failure{Message: s, Code: s, Status: n}}},
		{Type: s, Usage: &llm.Usage{}, Reason: &llm.FinishReason{Kind: s}}}
	out := []Payload{TurnStart{Turn: n}, StepStart{Turn: n, Step: -n}, StepEnd{Turn: n, Step: n},
		ToolCall{Turn: n, Step: n, CallID: s, Name: s, Arguments: s},
		ToolResult{Turn: n, Step: n, Message: full}, ToolResult{Turn: n, Message: bare, Error: &fault.Info{Name: s, Code: s}, Meta: json.RawMessage(` {"k" : [1, "v"]} `)},
		AssistantMessage{Turn: n, Step: n, Message: full, Usage: &usage, Interrupted: true}, AssistantMessage{Message: empty},
		AssistantMessage{Message: bare, Usage: &llm.Usage{}},
		UserMessage{Message: full}, UserMessage{Message: bare},
		TurnEnd{Turn: n, Reason: TurnReason{Kind: s}},
		TurnEnd{Turn: n, Reason: TurnReason{Kind: s, Reason: &Cause{Kind: s, Reason: s}, Error: &TurnError{Message: s, Code: s, Status: n}}},
		TurnEnd{Reason: TurnReason{Reason: &Cause{}, Error: &TurnError{}}},
		Insertion(s, n, full, bare), Deletion(s, n, s), InboxSpliced{Target: s}, InboxSpliced{Target: s, Inserted: []llm.Message{}},
		RequestContext{Provider: s, Model: s, ContextWindow: n}, RequestContext{},
		RequestHeader{Reason: s}, RequestHeader{Reason: s, Header: ModelHeader{
			Config:          llm.Config{Provider: s, Model: s, BaseURL: s, MaxTokens: n, ReasoningEffort: s},
			AdapterDefaults: map[string]bool{s: true, "maxTokens": false, "b" + s: true}, System: s,
			Tools: []llm.ToolSchema{{Name: s, Description: s, Parameters: json.RawMessage(" { \"type\" : \"object\" } ")}, {Name: s}}}}}
	for _, c := range chunks {
		out = append(out, AssistantChunk{Turn: n, Step: n, Chunk: c})
	}
	return out
}

func checkAppendPayload(t *testing.T, s string, n int) {
	t.Helper()
	for _, p := range payloadSamples(s, n) {
		got, ok := appendPayload(nil, p)
		if !ok {
			t.Fatalf("%T %+v was left to encoding/json", p, p)
		}
		want, err := marshalPayload(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%T:\n got %s\nwant %s", p, got, want)
		}
		if _, err := losslessJSON(got); err != nil {
			t.Fatalf("%T: %s is not lossless JSON: %v", p, got, err)
		}
	}
}

// TestAppendPayloadMatchesEncodingJSON: the payloads written without reflection are byte for byte
// what encoding/json writes, and lossless JSON; those holding JSON of their own are left to it.
func TestAppendPayloadMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", "a\"b\\c\n\x00<tag>&\u2028é😀\xff\xed\xa0\x80"} {
		for _, n := range []int{0, 1, -7, 1 << 40} {
			checkAppendPayload(t, s, n)
		}
	}
	for _, p := range []Payload{
		ToolResult{Meta: json.RawMessage(`{"a":-0}`)}, ToolResult{Mutations: []FileMutation{{Version: 1}}},
		UserMessage{Message: llm.Message{Source: llm.Source{ReplayState: json.RawMessage(`{}`)}}},
		UserMessage{Message: llm.Message{Content: []llm.Block{{Type: "video"}}}},
		RequestHeader{Header: ModelHeader{Config: llm.Config{Temperature: new(float64)}}},
		RequestHeader{Header: ModelHeader{Tools: []llm.ToolSchema{{Parameters: json.RawMessage(`{"a":1,"a":2}`)}}}},
		RequestHeader{Header: ModelHeader{Tools: []llm.ToolSchema{{Parameters: json.RawMessage{}}}}}, LLMRetry{},
	} {
		if b, ok := appendPayload(nil, p); ok {
			t.Fatalf("%T written without reflection: %s", p, b)
		}
	}
}

func FuzzAppendPayload(f *testing.F) {
	f.Add("a\"b\\c\n\x00<tag>&\u2028é😀\xff", 3)
	f.Add("", 0)
	f.Fuzz(checkAppendPayload)
}
