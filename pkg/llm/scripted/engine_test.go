package scripted_test

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/llm/scripted"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text string
		want scripted.Script
		pure bool
	}{
		{"text", scripted.Script{Tool: "echo", RetryAfter: 1}, true},
		{"tools:4", scripted.Script{Tools: 4, Steps: 1, Tool: "echo", RetryAfter: 1}, true},
		{"tool:run_code", scripted.Script{Tools: 1, Steps: 1, Tool: "run_code", RetryAfter: 1}, true},
		{"tools:2 steps:3 fail:server failtimes:2 latency:5 chunkdelay:7 keepalive:9 chunks:3 retryafter:4",
			scripted.Script{Tools: 2, Steps: 3, Tool: "echo", Fail: "SERVER", FailTimes: 2, RetryAfter: 4,
				Latency: 5 * time.Millisecond, ChunkDelay: 7 * time.Millisecond, KeepAlive: 9, Chunks: 3}, true},
		{`args:{"a":1}`, scripted.Script{Tool: "echo", Args: `{"a":1}`, RetryAfter: 1}, true},
		{"args:%7B%22code%22%3A%22x%20y%22%7D", scripted.Script{Tool: "echo", Args: `{"code":"x y"}`, RetryAfter: 1}, true},
		{"say:Hello%2C+world reasoning:think%20first maxtokens",
			scripted.Script{Tool: "echo", Say: "Hello, world", Reasoning: "think first", MaxTokens: true, RetryAfter: 1}, true},
		{"please say hello", scripted.Script{Tool: "echo", RetryAfter: 1}, false},
		{"tools:x", scripted.Script{Tool: "echo", RetryAfter: 1}, false},
		{"fail:NOPE", scripted.Script{Tool: "echo", RetryAfter: 1}, false},
		{"", scripted.Script{Tool: "echo", RetryAfter: 1}, false},
	}
	for _, tt := range tests {
		got, pure := scripted.Parse(tt.text)
		if got != tt.want || pure != tt.pure {
			t.Errorf("Parse(%q) = %+v, %v; want %+v, %v", tt.text, got, pure, tt.want, tt.pure)
		}
	}
}

// TestParseClampsNumbers: a script is tenant input, so every number is clamped to a bound that
// keeps one request cheap, and the clamped script is still a pure script.
func TestParseClampsNumbers(t *testing.T) {
	t.Parallel()
	got, pure := scripted.Parse("tools:400000 steps:1000000000 chunks:99999999999999999999999 latency:86400000 " +
		"chunkdelay:3600000 keepalive:20000000 retryafter:100000 failtimes:1000000 fail:server")
	want := scripted.Script{Tools: scripted.MaxTools, Steps: scripted.MaxSteps, Chunks: scripted.MaxChunks,
		Latency: time.Minute, ChunkDelay: 10 * time.Second, KeepAlive: scripted.MaxKeepAlive,
		RetryAfter: scripted.MaxRetryAfter, FailTimes: scripted.MaxFailTimes, Fail: "SERVER", Tool: "echo"}
	if got != want || !pure {
		t.Fatalf("Parse = %+v, %v; want %+v, true", got, pure, want)
	}
	for _, w := range []string{"tools:-1", "tools:+3", "tools:", "tools:1e3", "steps:0x10"} {
		if _, pure := scripted.Parse(w); pure {
			t.Errorf("Parse(%q) is pure; want invalid", w)
		}
	}
	// The largest plan stays small: tools:20000 used to answer with 100k chunks.
	p := scripted.Respond(history("u:tools:20000 chunks:20000"))
	calls := 0
	for _, c := range p.Chunks {
		if c.Type == llm.ChunkBlockEnd {
			calls++
		}
	}
	if calls != scripted.MaxTools || len(p.Chunks) > scripted.MaxTools*(scripted.MaxChunks+3)+2 {
		t.Fatalf("%d calls in %d chunks", calls, len(p.Chunks))
	}
}

// history builds a request from a compact description: "u:<text>" user message,
// "p:<text>" plugin message, "a:<n>" assistant message with n tool calls, "a:text" assistant
// text, "r:<n>" n tool results answering the previous assistant message.
func history(items ...string) llm.Request {
	var req llm.Request
	var lastCalls []llm.Block
	for i, it := range items {
		kind, arg, _ := strings.Cut(it, ":")
		id := "m" + string(rune('a'+i))
		switch kind {
		case "u":
			req.Messages = append(req.Messages, llm.NewUserMessage(id, arg))
		case "p":
			m := llm.NewUserMessage(id, arg)
			m.Source = llm.Source{Kind: llm.SourcePlugin, Plugin: "ctx"}
			req.Messages = append(req.Messages, m)
		case "a":
			m := llm.Message{ID: id, Role: llm.RoleAssistant, Source: llm.Source{Kind: llm.SourceModel, Provider: "scripted", Model: "s"}}
			if arg == "text" {
				m.Content = []llm.Block{llm.TextBlock("ok")}
			} else {
				lastCalls = nil
				for n := range int(arg[0] - '0') {
					lastCalls = append(lastCalls, llm.ToolCallBlock(id+"c"+string(rune('0'+n)), "echo", "{}"))
				}
				m.Content = lastCalls
			}
			req.Messages = append(req.Messages, m)
		case "r":
			for _, c := range lastCalls {
				req.Messages = append(req.Messages, llm.NewToolResultMessage(id+c.ID, c.ID, []llm.Block{llm.TextBlock("x")}, false))
			}
		}
	}
	return req
}

func TestRespond(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		req    llm.Request
		finish string
		blocks []llm.Block
	}{
		{"text", history("u:text"), llm.FinishStop,
			[]llm.Block{llm.TextBlock("Done after 0 steps and 0 tool results.")}},
		{"no script", history("u:hello there"), llm.FinishStop,
			[]llm.Block{llm.TextBlock("Done after 0 steps and 0 tool results.")}},
		{"parallel calls", history("u:tools:3"), llm.FinishToolCalls, []llm.Block{
			llm.ToolCallBlock("call_1_1", "echo", `{"text":"step 1 call 1"}`),
			llm.ToolCallBlock("call_1_2", "echo", `{"text":"step 1 call 2"}`),
			llm.ToolCallBlock("call_1_3", "echo", `{"text":"step 1 call 3"}`)}},
		{"final after one step", history("u:tools:3", "a:3", "r:"), llm.FinishStop,
			[]llm.Block{llm.TextBlock("Done after 1 steps and 3 tool results.")}},
		{"second of two steps", history("u:tools:2 steps:2", "a:2", "r:"), llm.FinishToolCalls, []llm.Block{
			llm.ToolCallBlock("call_2_1", "echo", `{"text":"step 2 call 1"}`),
			llm.ToolCallBlock("call_2_2", "echo", `{"text":"step 2 call 2"}`)}},
		{"after two steps", history("u:tools:2 steps:2", "a:2", "r:", "a:2", "r:"), llm.FinishStop,
			[]llm.Block{llm.TextBlock("Done after 2 steps and 4 tool results.")}},
		{"ids unique across turns", history("u:tools:1", "a:1", "r:", "a:text", "u:tools:1"), llm.FinishToolCalls,
			[]llm.Block{llm.ToolCallBlock("call_3_1", "echo", `{"text":"step 1 call 1"}`)}},
		{"counts from the last user message", history("u:tools:1", "a:1", "r:", "a:text", "u:text"), llm.FinishStop,
			[]llm.Block{llm.TextBlock("Done after 0 steps and 0 tool results.")}},
		{"plugin snapshot after the script", history("u:tools:1", "p:runtime context: cwd /x"), llm.FinishToolCalls,
			[]llm.Block{llm.ToolCallBlock("call_1_1", "echo", `{"text":"step 1 call 1"}`)}},
		{"named tool and args", history("u:tool:run_code args:%7B%22code%22%3A%221%2B1%22%7D"), llm.FinishToolCalls,
			[]llm.Block{llm.ToolCallBlock("call_1_1", "run_code", `{"code":"1+1"}`)}},
		{"say", history("u:say:Hello%20there"), llm.FinishStop, []llm.Block{llm.TextBlock("Hello there")}},
		{"reasoning", history("u:reasoning:hmm%20ok tools:1"), llm.FinishToolCalls, []llm.Block{
			{Type: llm.BlockReasoning, Text: "hmm ok"},
			llm.ToolCallBlock("call_1_1", "echo", `{"text":"step 1 call 1"}`)}},
		{"maxtokens", history("u:maxtokens"), llm.FinishMaxTokens, []llm.Block{
			llm.TextBlock("This answer is cut off"),
			llm.ToolCallBlock("call_1_1", "echo", `{"text":"cut off mid-arg`)}},
	}
	for _, tt := range tests {
		plan := scripted.Respond(tt.req)
		res := replay(t, plan.Chunks)
		if res.Finish != tt.finish {
			t.Errorf("%s: finish %q, want %q", tt.name, res.Finish, tt.finish)
		}
		if got, want := jsonOf(t, res.Blocks), jsonOf(t, tt.blocks); got != want {
			t.Errorf("%s: blocks\n got %s\nwant %s", tt.name, got, want)
		}
	}
}

// replay checks that chunks follow the streaming grammar (deltas inside started blocks, each
// block-end equal to what its deltas built, usage then finish last) and returns the result.
func replay(t *testing.T, chunks []llm.Chunk) llm.Result {
	t.Helper()
	built := map[int]*llm.Block{}
	for i, c := range chunks {
		switch c.Type {
		case llm.ChunkBlockStart:
			built[*c.Index] = &llm.Block{Type: c.BlockType}
		case llm.ChunkTextDelta, llm.ChunkReasoningDelta:
			built[*c.Index].Text += c.Text
		case llm.ChunkToolCallDelta:
			b := built[*c.Index]
			b.ID, b.Name, b.Arguments = c.ID, c.Name, b.Arguments+*c.ArgumentsDelta
		case llm.ChunkBlockEnd:
			if got, want := jsonOf(t, *c.Block), jsonOf(t, *built[*c.Index]); got != want {
				t.Fatalf("chunk %d: block-end %s, deltas built %s", i, got, want)
			}
		case llm.ChunkFinish:
			if i != len(chunks)-1 || chunks[i-1].Type != llm.ChunkUsage {
				t.Fatalf("finish must be last, after usage: %s", jsonOf(t, chunks))
			}
		}
	}
	res, err := llm.ReadAll(&sliceStream{chunks: chunks})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

type sliceStream struct{ chunks []llm.Chunk }

func (s *sliceStream) Recv() (llm.Chunk, error) {
	if len(s.chunks) == 0 {
		return llm.Chunk{}, io.EOF
	}
	c := s.chunks[0]
	s.chunks = s.chunks[1:]
	return c, nil
}

func (s *sliceStream) Close() error { return nil }

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestRespondMatchesReferenceLogs compares the chunks of the first step with the reference's
// assistant/chunk events, with the reference's call ids c1.. mapped to ours and usage left out.
func TestRespondMatchesReferenceLogs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ file, script string }{{"text.jsonl", "text"}, {"tools-4.jsonl", "tools:4"}} {
		want := referenceChunks(t, filepath.Join("testdata", tt.file))
		if len(want) < 10 {
			t.Fatalf("%s: only %d reference chunks", tt.file, len(want))
		}
		var got []string
		for _, c := range scripted.Respond(history("u:" + tt.script)).Chunks {
			if c.Type != llm.ChunkUsage {
				got = append(got, jsonOf(t, c))
			}
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s:\n got %s\nwant %s", tt.file, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

func referenceChunks(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev struct {
			Type string
			Data struct {
				Step  int
				Chunk llm.Chunk
			}
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type != "assistant/chunk" || ev.Data.Step != 1 || ev.Data.Chunk.Type == llm.ChunkUsage {
			continue
		}
		s := jsonOf(t, ev.Data.Chunk)
		for n := 9; n >= 1; n-- {
			s = strings.ReplaceAll(s, `"c`+string(rune('0'+n))+`"`, `"call_1_`+string(rune('0'+n))+`"`)
		}
		out = append(out, s)
	}
	return out
}
