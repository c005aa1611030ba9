package mockllm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/llm/openai"
	"github.com/dshd/dshd/pkg/llm/scripted"
)

// wait waits d, or until the client goes away or the server closes; it reports whether to go
// on.
func (s *Server) wait(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return r.Context().Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
	case <-s.done:
	}
	return false
}

// failStatus answers the failures that are a status code, as the providers send them, and
// reports whether it did. fail:TIMEOUT never answers: it holds the request until the client
// gives up. TRANSPORT, MALFORMED and EMPTY_RESPONSE fail inside a 200 response instead.
func (s *Server) failStatus(w http.ResponseWriter, r *http.Request, plan scripted.Plan) bool {
	switch plan.Script.Fail {
	case llm.CodeTransport, scripted.FailMalformed, llm.CodeEmptyResponse:
		return false
	case llm.CodeRateLimit:
		w.Header().Set("Retry-After", strconv.Itoa(plan.Script.RetryAfter))
		writeError(w, http.StatusTooManyRequests, "rate_limit_error", "Rate Limit Reached")
	case llm.CodeInvalidCredential:
		writeError(w, http.StatusUnauthorized, "authentication_error", "Authentication Fails, Your api key is invalid")
	case llm.CodeQuota:
		writeError(w, http.StatusPaymentRequired, "unknown_error", "Insufficient Balance")
	case llm.CodeContextWindowExceeded:
		writeError(w, http.StatusBadRequest, "invalid_request_error",
			"This model's maximum context length is 131072 tokens. However, you requested 140000 tokens. Please reduce the length of the messages.")
	case llm.CodeTimeout:
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
	default:
		writeError(w, http.StatusInternalServerError, "server_error", "The server had an error while processing your request")
	}
	return true
}

// writeStream writes the plan as server-sent events: keep-alive comments, a role chunk, the
// deltas, the finish chunk, a usage chunk when stream_options.include_usage asked for it, and
// [DONE]. fail:TRANSPORT drops the connection halfway; fail:MALFORMED sends a broken chunk
// halfway; fail:EMPTY_RESPONSE sends only [DONE].
func (s *Server) writeStream(w http.ResponseWriter, r *http.Request, wr openai.ChatRequest, plan scripted.Plan, fail bool) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	var buf strings.Builder
	for range plan.Script.KeepAlive {
		buf.WriteString(": keep-alive\n\n")
	}
	if fail && plan.Script.Fail == llm.CodeEmptyResponse {
		buf.WriteString("data: [DONE]\n\n")
		_, _ = w.Write([]byte(buf.String()))
		return
	}
	enc := newEncoder(wr.Model, wr.StreamOptions != nil && wr.StreamOptions.IncludeUsage)
	events := enc.events(plan.Chunks)
	cut := -1
	if fail {
		cut = len(events) / 2
	}
	for i, ev := range events {
		if i == cut {
			s.failMidStream(w, flusher, &buf, plan.Script.Fail)
			return
		}
		// The role chunk and the first delta go out together; chunkdelay separates the rest.
		if i > 1 && !s.wait(r, plan.Script.ChunkDelay) {
			return
		}
		buf.WriteString("data: ")
		buf.Write(ev)
		buf.WriteString("\n\n")
		if _, err := w.Write([]byte(buf.String())); err != nil {
			return
		}
		buf.Reset()
		if flusher != nil {
			flusher.Flush()
		}
	}
	_, _ = w.Write([]byte("data: [DONE]\n\n"))
}

func (s *Server) failMidStream(w http.ResponseWriter, flusher http.Flusher, buf *strings.Builder, code string) {
	if code == scripted.FailMalformed {
		buf.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"trunc\n\ndata: [DONE]\n\n")
		_, _ = w.Write([]byte(buf.String()))
		return
	}
	_, _ = w.Write([]byte(buf.String()))
	if flusher != nil {
		flusher.Flush()
	}
	// The server closes the connection without ending the chunked body: the client sees an
	// unexpected EOF, as after a connection reset.
	panic(http.ErrAbortHandler)
}

// writeCompletion writes the plan as one chat.completion object. Failures that a stream would
// show mid-way become a truncated body (TRANSPORT, MALFORMED) or a response without choices
// (EMPTY_RESPONSE).
func (s *Server) writeCompletion(w http.ResponseWriter, wr openai.ChatRequest, plan scripted.Plan, fail bool) {
	cc := completion(wr.Model, plan.Chunks)
	if fail && plan.Script.Fail == llm.CodeEmptyResponse {
		cc.Choices = []openai.CompletionChoice{}
	}
	data, _ := json.Marshal(cc)
	w.Header().Set("Content-Type", "application/json")
	if fail && plan.Script.Fail != llm.CodeEmptyResponse {
		if plan.Script.Fail == llm.CodeTransport {
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(data[:len(data)/2])
		if plan.Script.Fail == llm.CodeTransport {
			panic(http.ErrAbortHandler)
		}
		return
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

func completion(model string, chunks []llm.Chunk) openai.ChatCompletion {
	var text, reasoning strings.Builder
	choice := openai.CompletionChoice{Message: openai.Delta{Role: "assistant"}}
	cc := openai.ChatCompletion{ID: "chatcmpl-mock", Object: "chat.completion", Model: model}
	for _, c := range chunks {
		switch c.Type {
		case llm.ChunkTextDelta:
			text.WriteString(c.Text)
		case llm.ChunkReasoningDelta:
			reasoning.WriteString(c.Text)
		case llm.ChunkBlockEnd:
			if c.Block.Type == llm.BlockToolCall {
				choice.Message.ToolCalls = append(choice.Message.ToolCalls, openai.ToolCall{ID: c.Block.ID,
					Type: "function", Function: openai.FunctionCall{Name: c.Block.Name, Arguments: c.Block.Arguments}})
			}
		case llm.ChunkUsage:
			cc.Usage = wireUsage(*c.Usage)
		case llm.ChunkFinish:
			choice.FinishReason = finishReason(c.Reason.Kind)
		}
	}
	t := text.String()
	choice.Message.Content = &t
	if reasoning.Len() > 0 {
		r := reasoning.String()
		choice.Message.ReasoningContent = &r
	}
	cc.Choices = []openai.CompletionChoice{choice}
	return cc
}

func finishReason(kind string) string {
	switch kind {
	case llm.FinishToolCalls:
		return "tool_calls"
	case llm.FinishMaxTokens:
		return "length"
	}
	return "stop"
}

// wireUsage reports usage both ways: DeepSeek's prompt_cache_hit/miss_tokens and OpenAI's
// prompt_tokens_details.cached_tokens.
func wireUsage(u llm.Usage) *openai.Usage {
	hit, miss := u.CacheReadTokens, u.CacheMissTokens
	return &openai.Usage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens,
		TotalTokens: u.InputTokens + u.OutputTokens, PromptCacheHitTokens: &hit, PromptCacheMissTokens: &miss,
		PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: hit}}
}

// encoder turns plan chunks into the JSON payloads of chat.completion.chunk events.
type encoder struct {
	model        string
	includeUsage bool
	toolIndex    map[int]int // block index -> wire tool index
	started      map[int]bool
}

func newEncoder(model string, includeUsage bool) *encoder {
	return &encoder{model: model, includeUsage: includeUsage, toolIndex: map[int]int{}, started: map[int]bool{}}
}

func (e *encoder) events(chunks []llm.Chunk) [][]byte {
	empty := ""
	out := [][]byte{e.encode(openai.Delta{Role: "assistant", Content: &empty}, nil, nil)}
	var usage *openai.Usage
	for _, c := range chunks {
		switch c.Type {
		case llm.ChunkBlockStart:
			if c.BlockType == llm.BlockToolCall {
				e.toolIndex[*c.Index] = len(e.toolIndex)
			}
		case llm.ChunkTextDelta:
			out = append(out, e.encode(openai.Delta{Content: &c.Text}, nil, nil))
		case llm.ChunkReasoningDelta:
			out = append(out, e.encode(openai.Delta{ReasoningContent: &c.Text}, nil, nil))
		case llm.ChunkToolCallDelta:
			out = append(out, e.encode(openai.Delta{ToolCalls: []openai.ToolCall{e.toolDelta(c)}}, nil, nil))
		case llm.ChunkUsage:
			usage = wireUsage(*c.Usage)
		case llm.ChunkFinish:
			fr := finishReason(c.Reason.Kind)
			out = append(out, e.encode(openai.Delta{}, &fr, nil))
		}
	}
	if e.includeUsage && usage != nil {
		out = append(out, e.encode(openai.Delta{}, nil, usage))
	}
	return out
}

// toolDelta gives the first delta of a call its id, type and name, as OpenAI does; later
// deltas carry only the index and an arguments fragment.
func (e *encoder) toolDelta(c llm.Chunk) openai.ToolCall {
	idx := e.toolIndex[*c.Index]
	tc := openai.ToolCall{Index: &idx, Function: openai.FunctionCall{Arguments: *c.ArgumentsDelta}}
	if !e.started[*c.Index] {
		e.started[*c.Index] = true
		tc.ID, tc.Type, tc.Function.Name = c.ID, "function", c.Name
	}
	return tc
}

func (e *encoder) encode(d openai.Delta, finish *string, usage *openai.Usage) []byte {
	ch := openai.ChatChunk{ID: "chatcmpl-mock", Object: "chat.completion.chunk", Model: e.model}
	if usage != nil {
		ch.Choices, ch.Usage = []openai.ChunkChoice{}, usage
	} else {
		ch.Choices = []openai.ChunkChoice{{Delta: d, FinishReason: finish}}
	}
	data, err := json.Marshal(ch)
	if err != nil {
		panic(fmt.Sprintf("mockllm: encode chunk: %v", err))
	}
	return data
}
