package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dshd/dshd/pkg/llm"
)

// errClosed is returned by Recv after Close.
var errClosed = errors.New("openai: stream closed")

// idleTimer cancels an attempt when it is not reset within its duration. A nil *idleTimer
// (IdleTimeout disabled) does nothing.
type idleTimer struct {
	d time.Duration
	t *time.Timer
}

func newIdleTimer(d time.Duration, cancel context.CancelCauseFunc) *idleTimer {
	if d < 0 {
		return nil
	}
	return &idleTimer{d: d, t: time.AfterFunc(d, func() { cancel(errIdle) })}
}

func (t *idleTimer) reset() {
	if t != nil {
		t.t.Reset(t.d)
	}
}

func (t *idleTimer) stop() {
	if t != nil {
		t.t.Stop()
	}
}

// idleReader resets the idle timer whenever bytes arrive.
type idleReader struct {
	r io.Reader
	t *idleTimer
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.t.reset()
	}
	return n, err
}

// sseStream is the llm.Stream of a streamed response. Recv is for one goroutine; Close may be
// called from any goroutine, also while Recv blocks, and makes it return.
type sseStream struct {
	ctx     context.Context // the caller's context
	actx    context.Context // the attempt's context (caller's plus idle timeout)
	cancel  context.CancelCauseFunc
	idle    *idleTimer
	body    io.Closer
	sse     *sseReader
	asm     *assembler
	pending []llm.Chunk
	err     error // returned once pending is drained; io.EOF after a healthy end
	sawData bool

	closed    atomic.Bool // Close was called
	closeOnce sync.Once
}

func newSSEStream(ctx, actx context.Context, cancel context.CancelCauseFunc, idle *idleTimer, body io.Closer, r io.Reader) *sseStream {
	return &sseStream{ctx: ctx, actx: actx, cancel: cancel, idle: idle, body: body,
		sse: newSSEReader(r), asm: newAssembler()}
}

// Recv returns the next chunk, io.EOF after the finish chunk, or an error: TRANSPORT for a
// disconnect or a malformed chunk, EMPTY_RESPONSE for a stream without content, TIMEOUT for
// the idle timeout or a context deadline, context.Canceled when the context was cancelled.
func (s *sseStream) Recv() (llm.Chunk, error) {
	for len(s.pending) == 0 {
		if s.err != nil {
			return llm.Chunk{}, s.err
		}
		s.err = s.fill()
		s.pending = s.asm.take() // read before the next fill adds to the assembler again
		if s.err != nil {
			s.release()
		}
	}
	c := s.pending[0]
	s.pending = s.pending[1:]
	return c, nil
}

// fill reads one event and feeds it to the assembler. It returns io.EOF once the stream has
// ended and the closing chunks are pending.
func (s *sseStream) fill() error {
	data, err := s.sse.next()
	if err != nil {
		return s.endError(err)
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
		return s.finalize()
	}
	s.sawData = true
	return s.asm.addData(data)
}

func (s *sseStream) endError(err error) error {
	if s.closed.Load() {
		return errClosed
	}
	if s.ctx.Err() != nil || s.actx.Err() != nil {
		return readError(s.ctx, s.actx, err, "read stream")
	}
	switch {
	case errors.Is(err, errEventTooLarge):
		return llm.NewError(llm.CodeTransport, "malformed stream: %v", err)
	case !errors.Is(err, io.EOF):
		return readError(s.ctx, s.actx, err, "read stream")
	case !s.sawData:
		return llm.NewError(llm.CodeEmptyResponse, "the stream ended without any data")
	case s.asm.finish != "":
		return s.finalize() // no [DONE], but the model had finished
	}
	return llm.NewError(llm.CodeTransport, "the stream ended before the response was complete")
}

func (s *sseStream) finalize() error {
	if err := s.asm.finalize(); err != nil {
		return err
	}
	return io.EOF
}

// Close releases the connection; a Recv blocked on it, or any later one, returns an error.
// It is idempotent.
func (s *sseStream) Close() error {
	s.closed.Store(true)
	s.release()
	return nil
}

func (s *sseStream) release() {
	s.closeOnce.Do(func() {
		s.idle.stop()
		s.cancel(errClosed)
		s.body.Close()
	})
}

// fixedStream replays chunks already in memory (a non-streamed response). It still stops
// with the context error once ctx is cancelled.
type fixedStream struct {
	ctx    context.Context
	chunks []llm.Chunk
	mu     sync.Mutex
	closed bool
}

// Recv returns the next chunk, then io.EOF.
func (s *fixedStream) Recv() (llm.Chunk, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return llm.Chunk{}, errClosed
	}
	if err := s.ctx.Err(); err != nil {
		return llm.Chunk{}, readError(s.ctx, s.ctx, err, "read response")
	}
	if len(s.chunks) == 0 {
		return llm.Chunk{}, io.EOF
	}
	c := s.chunks[0]
	s.chunks = s.chunks[1:]
	return c, nil
}

// Close is idempotent.
func (s *fixedStream) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

// completionChunks converts a non-streamed response into the chunk sequence a stream of it
// would give.
func completionChunks(data []byte) ([]llm.Chunk, error) {
	var cc ChatCompletion
	if err := json.Unmarshal(data, &cc); err != nil {
		e := llm.NewError(llm.CodeTransport, "malformed response: %v", err)
		e.Err = fmt.Errorf("%w (data %q)", err, clip(data, 120))
		return nil, e
	}
	chunk := ChatChunk{Usage: cc.Usage, Error: cc.Error}
	for _, ch := range cc.Choices {
		delta := ch.Message
		for i := range delta.ToolCalls {
			delta.ToolCalls[i].Index = &i
		}
		fr := ch.FinishReason
		chunk.Choices = append(chunk.Choices, ChunkChoice{Index: ch.Index, Delta: delta, FinishReason: &fr})
	}
	a := newAssembler()
	if err := a.add(chunk); err != nil {
		return nil, err
	}
	if err := a.finalize(); err != nil {
		return nil, err
	}
	return a.take(), nil
}
