// Package scripted is a deterministic model driven by a small script language written in the
// last user message (see Script). Respond is a pure function from a request to a Plan; the
// in-process Provider and the mock OpenAI server (internal/mockllm) both play plans. It is the
// embedded default model when no API key is configured, and the test double of the agent loop.
package scripted

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/dshd/dshd/pkg/llm"
)

// Attempts counts the attempts of each request so that failtimes:N fails the first N
// attempts of a request and lets the next succeed. Safe for concurrent use; the zero value is
// ready.
type Attempts struct {
	mu sync.Mutex
	n  map[string]int
}

// maxKeys bounds the counters kept; beyond it they start over.
const maxKeys = 4096

// Fail counts one attempt of the request with this key and reports whether it fails: always
// when the plan's script fails without failtimes, for the first FailTimes attempts otherwise.
func (a *Attempts) Fail(key string, p Plan) bool {
	if p.Script.Fail == "" {
		return false
	}
	if p.Script.FailTimes == 0 {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n == nil || len(a.n) >= maxKeys {
		a.n = map[string]int{}
	}
	a.n[key]++
	return a.n[key] <= p.Script.FailTimes
}

// Reset forgets every counter.
func (a *Attempts) Reset() {
	a.mu.Lock()
	a.n = nil
	a.mu.Unlock()
}

// Config configures a Provider.
type Config struct {
	// SleepFunc waits for latency and chunk delays, returning early with ctx.Err(). Default: a
	// timer.
	SleepFunc func(ctx context.Context, d time.Duration) error
}

// Provider is the in-process scripted model. It is safe for concurrent use.
type Provider struct {
	cfg      Config
	attempts Attempts
}

var _ llm.Provider = (*Provider)(nil)

// New returns a scripted Provider.
func New(cfg Config) *Provider {
	if cfg.SleepFunc == nil {
		cfg.SleepFunc = llm.Sleep
	}
	return &Provider{cfg: cfg}
}

// Name returns the provider name, "scripted".
func (p *Provider) Name() string { return "scripted" }

// Stream plays the plan for req. After the script's latency it returns the scripted failure as
// an *llm.Error, except TRANSPORT and MALFORMED, which fail mid-stream after half the chunks.
func (p *Provider) Stream(ctx context.Context, req llm.Request) (llm.Stream, error) {
	plan := Respond(req)
	if err := p.cfg.SleepFunc(ctx, plan.Script.Latency); err != nil {
		return nil, ctxError(err)
	}
	s := &stream{ctx: ctx, sleep: p.cfg.SleepFunc, delay: plan.Script.ChunkDelay, chunks: plan.Chunks}
	if !p.attempts.Fail(RequestKey(req), plan) {
		return s, nil
	}
	switch plan.Script.Fail {
	case llm.CodeTransport:
		s.chunks, s.err = s.chunks[:len(s.chunks)/2], llm.NewError(llm.CodeTransport, "scripted: connection reset mid-stream")
	case FailMalformed:
		s.chunks, s.err = s.chunks[:len(s.chunks)/2], llm.NewError(llm.CodeTransport, "scripted: malformed stream chunk")
	default:
		return nil, llm.NewError(plan.Script.Fail, "scripted failure %s", plan.Script.Fail)
	}
	return s, nil
}

func ctxError(err error) error {
	if err == context.DeadlineExceeded {
		e := llm.NewError(llm.CodeTimeout, "scripted: %v", err)
		e.Err = err
		return e
	}
	return err
}

// stream plays chunks, then err (io.EOF when nil). Recv is for one goroutine; Close may be
// called from any.
type stream struct {
	ctx    context.Context
	sleep  func(context.Context, time.Duration) error
	delay  time.Duration
	chunks []llm.Chunk
	err    error
	sent   int

	mu     sync.Mutex
	closed bool
}

// Recv returns the next chunk, io.EOF at the end, or the context error once ctx is done.
func (s *stream) Recv() (llm.Chunk, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return llm.Chunk{}, io.ErrClosedPipe
	}
	if err := s.ctx.Err(); err != nil {
		return llm.Chunk{}, ctxError(err)
	}
	if len(s.chunks) == 0 {
		if s.err != nil {
			return llm.Chunk{}, s.err
		}
		return llm.Chunk{}, io.EOF
	}
	if s.sent > 0 && s.delay > 0 {
		if err := s.sleep(s.ctx, s.delay); err != nil {
			return llm.Chunk{}, ctxError(err)
		}
	}
	c := s.chunks[0]
	s.chunks = s.chunks[1:]
	s.sent++
	return c, nil
}

// Close is idempotent.
func (s *stream) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}
