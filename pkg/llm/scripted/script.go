package scripted

import (
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dshd/dshd/pkg/llm"
)

// Script is a parsed script: the directives of the last user message. The zero value answers
// with the default text.
//
// Grammar: directives separated by whitespace; unknown words are ignored.
//
//	text               a plain text answer (the default)
//	tools:N            N parallel tool calls per tool step (N >= 1)
//	steps:K            K tool steps before the final text (default 1 with tools:N or tool:)
//	tool:NAME          the tool to call (default echo)
//	args:JSON          the calls' arguments, raw JSON without spaces or URL-encoded
//	                   (default {"text":"step S call C"})
//	fail:CODE          fail with that LLM error code (RATE_LIMIT, SERVER, TRANSPORT, TIMEOUT,
//	                   INVALID_CREDENTIAL, QUOTA, CONTEXT_WINDOW_EXCEEDED, EMPTY_RESPONSE) or
//	                   MALFORMED (a malformed chunk mid-stream)
//	failtimes:N        fail only the first N attempts of each request, then succeed
//	retryafter:S       the Retry-After seconds of a mock RATE_LIMIT (default 1)
//	latency:MS         wait before the first chunk (or the failure)
//	chunkdelay:MS      wait between chunks
//	maxtokens          some text and half a tool call, then finish max-tokens
//	reasoning:TEXT     a reasoning block first (URL-encoded)
//	say:TEXT           the final answer (URL-encoded) instead of the default
//	keepalive:N        mockllm only: N ": keep-alive" comment lines before the first chunk
//	chunks:N           split text and arguments into about N pieces (default: text by words,
//	                   arguments in 8-byte pieces)
//
// Every number is a non-negative decimal integer. A script is tenant input, so numbers are
// clamped to bounds that keep one request cheap (a larger value means the bound, it is not an
// error): tools 64, steps 100, chunks 1000, latency 60000 ms, chunkdelay 10000 ms, keepalive
// 10000, retryafter 60 s, failtimes 10 (the Max* constants).
type Script struct {
	Tools      int
	Steps      int
	Tool       string
	Args       string
	Fail       string
	FailTimes  int
	RetryAfter int
	Latency    time.Duration
	ChunkDelay time.Duration
	MaxTokens  bool
	Reasoning  string
	Say        string
	KeepAlive  int
	Chunks     int
}

// Bounds of the numeric directives; a larger value is clamped to the bound.
const (
	MaxTools        = 64
	MaxSteps        = 100
	MaxChunks       = 1000
	MaxLatencyMs    = 60_000
	MaxChunkDelayMs = 10_000
	MaxKeepAlive    = 10_000
	MaxRetryAfter   = 60
	MaxFailTimes    = 10
)

// numberBounds are the bounds by directive name.
var numberBounds = map[string]int{
	"tools": MaxTools, "steps": MaxSteps, "chunks": MaxChunks, "latency": MaxLatencyMs,
	"chunkdelay": MaxChunkDelayMs, "keepalive": MaxKeepAlive, "retryafter": MaxRetryAfter,
	"failtimes": MaxFailTimes,
}

// failCodes are the codes fail: accepts.
var failCodes = map[string]bool{
	llm.CodeRateLimit: true, llm.CodeServer: true, llm.CodeTransport: true, llm.CodeTimeout: true,
	llm.CodeInvalidCredential: true, llm.CodeQuota: true, llm.CodeContextWindowExceeded: true,
	llm.CodeEmptyResponse: true, FailMalformed: true,
}

// Parse reads a script. pure is true when the text is not empty and every word of it is a
// valid directive, which tells a script from ordinary prose.
func Parse(text string) (s Script, pure bool) {
	words := strings.Fields(text)
	pure = len(words) > 0
	for _, w := range words {
		if !s.apply(w) {
			pure = false
		}
	}
	if (s.Tools > 0 || s.Tool != "") && s.Steps == 0 {
		s.Steps = 1
	}
	if s.Steps > 0 && s.Tools == 0 {
		s.Tools = 1
	}
	if s.Tool == "" {
		s.Tool = "echo"
	}
	if s.RetryAfter == 0 {
		s.RetryAfter = 1
	}
	return s, pure
}

// apply applies one directive and reports whether it was a valid one.
func (s *Script) apply(w string) bool {
	name, value, hasValue := strings.Cut(w, ":")
	switch name {
	case "text":
		return !hasValue
	case "maxtokens":
		s.MaxTokens = true
		return !hasValue
	case "tool":
		s.Tool = value
		return value != ""
	case "args":
		s.Args = decodeArgs(value)
		return value != ""
	case "fail":
		code := strings.ToUpper(value)
		if !failCodes[code] {
			return false
		}
		s.Fail = code
		return true
	case "reasoning", "say":
		text, err := url.QueryUnescape(value)
		if err != nil {
			text = value
		}
		if name == "say" {
			s.Say = text
		} else {
			s.Reasoning = text
		}
		return value != ""
	}
	return s.applyNumber(name, value)
}

// applyNumber applies a numeric directive, clamped to its bound.
func (s *Script) applyNumber(name, value string) bool {
	bound, ok := numberBounds[name]
	if !ok || value == "" || strings.Trim(value, "0123456789") != "" {
		return false
	}
	n, err := strconv.Atoi(value)
	if err != nil || n > bound {
		n = bound // only a number too long for an int fails to parse here
	}
	switch name {
	case "tools":
		s.Tools = n
	case "steps":
		s.Steps = n
	case "failtimes":
		s.FailTimes = n
	case "retryafter":
		s.RetryAfter = n
	case "latency":
		s.Latency = time.Duration(n) * time.Millisecond
	case "chunkdelay":
		s.ChunkDelay = time.Duration(n) * time.Millisecond
	case "keepalive":
		s.KeepAlive = n
	case "chunks":
		s.Chunks = n
	default:
		return false
	}
	return true
}

// decodeArgs takes raw JSON as it is, else URL-decodes it. Text that is JSON in neither form
// is kept as written, so a script can make a model send invalid arguments.
func decodeArgs(v string) string {
	if json.Valid([]byte(v)) {
		return v
	}
	if d, err := url.QueryUnescape(v); err == nil {
		return d
	}
	return v
}
