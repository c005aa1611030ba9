package agentloop

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/promptasm"
	"github.com/dshd/dshd/pkg/telemetry"
)

// callModel runs the step's model call and writes the chunks and the assembled
// `assistant/message`. It returns the message and the finish kind. A failed attempt ends with an
// `assistant/chunk` finish of kind error carrying the failure (LOOP-4); a retryable one is then
// sent again within the step, up to Config.ModelRetries times, each retry logged as `llm/retry`
// and written before the wait. On cancellation mid-stream it writes the partial text as an
// interrupted message and returns the context error.
func (r *Runner) callModel(ctx context.Context, turn, step int, asm promptasm.Result) (llm.Message, string, error) {
	for attempt := 1; ; attempt++ {
		cs := &chunkStager{r: r, turn: turn, step: step}
		msg, finish, err := r.attempt(ctx, cs, asm)
		if err == nil || ctx.Err() != nil || errors.Is(err, errLog) {
			return msg, finish, err
		}
		f := failureOf(err)
		if cs.finish != llm.FinishError && cs.finish != llm.FinishAbort {
			cs.push(llm.ErrorChunk(f)) // unless the provider's own finish chunk said so
		}
		delay, ok := r.retryDelay(err, attempt)
		if !ok {
			return msg, finish, err
		}
		r.w.stage(staged{typ: eventlog.TypeLLMRetry, data: eventlog.LLMRetry{Turn: turn, Step: step,
			Provider: r.model.Provider, Attempt: attempt, MaxRetries: *r.cfg.ModelRetries,
			DelayMs: float64(delay.Milliseconds()), Code: f.Code, Message: f.Message, Status: f.Status}})
		if err := r.logErr(r.w.flush(ctx)); err != nil {
			return llm.Message{}, "", err
		}
		r.cfg.Logger.WarnContext(ctx, "model call failed, retrying", "session", r.cfg.SessionID,
			"turn", turn, "step", step, "attempt", attempt, "code", f.Code, "delay", delay, "err", f.Message)
		if err := llm.Sleep(ctx, delay); err != nil {
			return llm.Message{}, "", err
		}
	}
}

// attempt is streamOnce in the attempt's span ("chat <model>", a child of the step's), recording
// its latency, time to first chunk, tokens and failure.
func (r *Runner) attempt(ctx context.Context, cs *chunkStager, asm promptasm.Result) (llm.Message, string, error) {
	provider, model := r.model.Provider, r.model.Model
	sctx, span := telemetry.StartChat(ctx, provider, model)
	cs.started = time.Now()
	msg, finish, err := r.streamOnce(sctx, cs, asm)
	code := ""
	if err != nil && !errors.Is(err, errLog) {
		code = failureOf(err).Code
		if ctx.Err() != nil {
			code = "ABORTED"
		}
	}
	if code != "ABORTED" && !errors.Is(err, errLog) {
		r.cfg.Metrics.ModelCall(provider, model, code, time.Since(cs.started))
	}
	in, out := 0, 0
	if cs.usage != nil {
		in, out = cs.usage.InputTokens, cs.usage.OutputTokens
		r.cfg.Metrics.ModelTokens(provider, model, in, out)
	}
	telemetry.EndChat(span, in, out, finish, code)
	return msg, finish, err
}

// retryDelay reports whether the failure of attempt (from 1) is retried and after how long:
// the provider's Retry-After when it sent one (not waited for beyond MaxRetryDelay), else
// RetryBackoff doubled per earlier retry, at most MaxRetryDelay.
func (r *Runner) retryDelay(err error, attempt int) (time.Duration, bool) {
	var le *llm.Error
	if !errors.As(err, &le) || !le.Retryable || attempt > *r.cfg.ModelRetries {
		return 0, false
	}
	if le.RetryAfter > 0 {
		return le.RetryAfter, le.RetryAfter <= r.cfg.MaxRetryDelay
	}
	d := r.cfg.RetryBackoff << (attempt - 1)
	if d <= 0 || d > r.cfg.MaxRetryDelay {
		d = r.cfg.MaxRetryDelay
	}
	return d, true
}

// recvItem is one result of Stream.Recv, passed from the reading goroutine.
type recvItem struct {
	c   llm.Chunk
	err error
}

// streamOnce makes one attempt of the model call, staging its chunks through cs.
func (r *Runner) streamOnce(ctx context.Context, cs *chunkStager, asm promptasm.Result) (llm.Message, string, error) {
	turn, step := cs.turn, cs.step
	req, err := r.request(asm)
	if err != nil {
		return llm.Message{}, "", err
	}
	// The call is made on the reading goroutine, so that the coalescing ticker below runs from the
	// start: what is pending (step/start, the last step's results) is written within a window even
	// while the client waits for its first byte or retries.
	items := make(chan recvItem, 16)
	done := make(chan struct{})
	var (
		mu     sync.Mutex
		stream llm.Stream
		closed bool
	)
	go func() {
		defer close(items)
		s, err := r.cfg.Provider.Stream(ctx, req)
		if err == nil {
			mu.Lock()
			if closed {
				err = context.Canceled
				s.Close()
			} else {
				stream = s
			}
			mu.Unlock()
		}
		for err == nil {
			var c llm.Chunk
			c, err = stream.Recv()
			select {
			case items <- recvItem{c, err}:
			case <-done:
				return
			}
		}
		if stream == nil {
			select {
			case items <- recvItem{err: err}:
			case <-done:
			}
		}
	}()
	defer func() {
		close(done)
		mu.Lock()
		closed = true
		if stream != nil {
			stream.Close()
		}
		mu.Unlock()
		for range items {
		}
	}()

	// The timer fires when the oldest pending event has waited the chunk window (docs/rules.md,
	// log-window), or a window from now when nothing is pending.
	tick := time.NewTimer(r.cfg.ChunkWindow)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			drainReceived(items, cs)
			return llm.Message{}, "", r.interrupted(cs, req, turn, step, ctx.Err())
		case <-tick.C:
			if err := r.flushIfDue(ctx); err != nil {
				return llm.Message{}, "", err
			}
			r.armFlush(tick)
		case it, ok := <-items:
			if !ok || it.err == io.EOF {
				return r.assistant(cs, turn, step)
			}
			if it.err != nil {
				if ctx.Err() != nil {
					drainReceived(items, cs)
					return llm.Message{}, "", r.interrupted(cs, req, turn, step, ctx.Err())
				}
				return llm.Message{}, "", it.err
			}
			if err := cs.checkLimits(it.c); err != nil {
				return llm.Message{}, "", err
			}
			if !cs.first {
				cs.first = true
				r.cfg.Metrics.ModelFirstChunk(r.model.Provider, r.model.Model, time.Since(cs.started))
			}
			wasPending := len(r.w.pending) > 0
			cs.push(it.c)
			if err := r.flushIfDue(ctx); err != nil {
				return llm.Message{}, "", err
			}
			if !wasPending || len(r.w.pending) == 0 {
				r.armFlush(tick)
			}
		}
	}
}

// armFlush sets t to fire when the writer's oldest pending event is due, or a chunk window from
// now when nothing is pending.
func (r *Runner) armFlush(t *time.Timer) {
	d, ok := r.w.untilDue(r.cfg.ChunkWindow)
	if !ok {
		d = r.cfg.ChunkWindow
	}
	resetTimer(t, max(d, time.Millisecond))
}

// drainReceived stages the chunks already received when the call is cancelled, so that all
// output streamed before the cancel is kept.
func drainReceived(items <-chan recvItem, cs *chunkStager) {
	for {
		select {
		case it, ok := <-items:
			if !ok || it.err != nil {
				return
			}
			cs.push(it.c)
		default:
			return
		}
	}
}

func (r *Runner) flushIfDue(ctx context.Context) error {
	if r.w.due(r.cfg.ChunkWindow, r.cfg.ChunkBytes) {
		return r.logErr(r.w.flush(ctx))
	}
	return nil
}

// request builds the frozen model request and stages `request/header` and `request/context`
// when they changed (LOOP-3, SES-13).
func (r *Runner) request(asm promptasm.Result) (llm.Request, error) {
	msgs, err := r.history()
	if err != nil {
		return llm.Request{}, err
	}
	h := eventlog.ModelHeader{Config: r.model, AdapterDefaults: r.defaults, System: asm.System, Tools: asm.Tools}
	h.Config.BaseURL = ""
	h = h.Canonical()
	switch inForce := r.headerInForce(); {
	case !r.headerLogged:
		reason := "initial"
		if r.m.header != nil {
			reason = "resume"
		}
		r.stageHeader(h, reason)
	case inForce == nil || !inForce.Equal(h):
		r.stageHeader(h, "change")
	}
	rc := eventlog.RequestContext{Provider: r.model.Provider, Model: r.model.Model,
		ContextWindow: r.cfg.ModelDefaults.ContextWindow}
	if c := r.contextInForce(); c == nil || *c != rc {
		r.stagedCtx = &stagedContext{c: rc, h: r.w.stage(staged{typ: eventlog.TypeRequestContext, data: rc})}
	}
	return llm.Request{Config: r.model, System: asm.System, Messages: msgs, Tools: asm.Tools,
		SessionID: r.cfg.SessionID}, nil
}

func (r *Runner) stageHeader(h eventlog.ModelHeader, reason string) {
	r.headerLogged = true
	size := len(h.System) + 64
	for _, t := range h.Tools {
		size += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	r.stagedHeader = &stagedHeader{m: h, h: r.w.stage(staged{typ: eventlog.TypeRequestHeader,
		data: eventlog.RequestHeader{Header: h, Reason: reason}, size: size})}
}

// stagedHeader and stagedContext are a request header or context this runner staged.
type stagedHeader struct {
	m eventlog.ModelHeader
	h *handle
}

type stagedContext struct {
	c eventlog.RequestContext
	h *handle
}

// headerInForce is the header in force (SES-13) for the next request: the one this runner
// staged, while it is not written yet, else the last one in the log, as the mirror folded it
// (another runner may have written a newer one since this runner's was committed). nil when
// there is none. It is the one implementation of the header in force.
func (r *Runner) headerInForce() *eventlog.ModelHeader {
	if s := r.stagedHeader; s != nil && s.h.seq < 0 {
		return &s.m
	}
	return r.m.header
}

// contextInForce is headerInForce for request/context.
func (r *Runner) contextInForce() *eventlog.RequestContext {
	if s := r.stagedCtx; s != nil && s.h.seq < 0 {
		return &s.c
	}
	return r.m.reqCtx
}

// history is the model-visible history: the committed surface plus the surface events still
// pending in the writer (always plain appends). It is built in one allocation: every step sends
// the whole history.
func (r *Runner) history() ([]llm.Message, error) {
	derived, err := r.m.log.DeriveMessages()
	if err != nil {
		return nil, err
	}
	n := len(derived)
	for _, s := range r.w.pending {
		n += len(s.entered)
		if _, ok := pendingMessage(s); ok {
			n++
		}
	}
	msgs := append(make([]llm.Message, 0, n), derived...)
	for _, s := range r.w.pending {
		msgs = append(msgs, s.entered...)
		if m, ok := pendingMessage(s); ok {
			msgs = append(msgs, m)
		}
	}
	return msgs, nil
}

// pendingMessage is the message a staged surface event adds to the history, if any.
func pendingMessage(s staged) (llm.Message, bool) {
	switch d := s.data.(type) {
	case eventlog.UserMessage:
		return d.Message, true
	case eventlog.ToolResult:
		return d.Message, true
	case eventlog.AssistantMessage:
		return d.Message, len(d.Message.Content) > 0
	}
	return llm.Message{}, false
}

// assistant writes the assembled message after a finished stream.
func (r *Runner) assistant(cs *chunkStager, turn, step int) (llm.Message, string, error) {
	finish := cs.finish
	if finish == "" {
		if len(cs.blocks) == 0 {
			return llm.Message{}, "", llm.NewError(llm.CodeEmptyResponse, "the model stream ended without output")
		}
		finish = llm.FinishStop
	}
	if finish == llm.FinishError || finish == llm.FinishAbort {
		if f := cs.failure; f != nil && f.Code != "" {
			e := llm.NewError(f.Code, "%s", f.Message)
			e.Status = f.Status
			return llm.Message{}, "", e
		}
		return llm.Message{}, "", llm.NewError(llm.CodeServer, "the model stream finished with %s", finish)
	}
	content := cs.content()
	if finish == llm.FinishMaxTokens {
		content = dropToolCalls(content)
	}
	msg := r.assistantMessage(content)
	r.w.stage(staged{typ: eventlog.TypeAssistantMessage, surface: true, cites: cs.cites,
		data: eventlog.AssistantMessage{Turn: turn, Step: step, Message: msg, Usage: cs.usage}})
	if r.cfg.AfterAssistantFunc != nil {
		r.cfg.AfterAssistantFunc(msg)
	}
	return msg, finish, nil
}

// interrupted writes the text and reasoning streamed before a cancel as an interrupted message
// (half-streamed tool calls are dropped) and returns err. The message carries no usage, as in
// the reference; the ignorable assistant/usage after it does: the provider's when the usage
// chunk came before the cancel, else estimated from req and what was streamed
// (llm.EstimateUsage, marked estimated), so the call is billed either way.
func (r *Runner) interrupted(cs *chunkStager, req llm.Request, turn, step int, err error) error {
	content := cs.partial()
	if len(content) > 0 {
		usage := cs.usage
		if usage == nil {
			u := llm.EstimateUsage(req, content)
			usage = &u
		}
		r.w.stage(staged{typ: eventlog.TypeAssistantMessage, surface: true, cites: cs.cites,
			data: eventlog.AssistantMessage{Turn: turn, Step: step, Message: r.assistantMessage(content), Interrupted: true}})
		r.w.stage(staged{typ: eventlog.TypeAssistantUsage, ignorable: true,
			data: eventlog.AssistantUsage{Turn: turn, Step: step, Usage: *usage}})
	}
	return err
}

func (r *Runner) assistantMessage(content []llm.Block) llm.Message {
	if content == nil {
		content = []llm.Block{}
	}
	return llm.Message{ID: r.newID(), Role: llm.RoleAssistant, Content: content,
		Source: llm.Source{Kind: llm.SourceModel, Provider: r.cfg.Model.Provider, Model: r.cfg.Model.Model}}
}

func dropToolCalls(blocks []llm.Block) []llm.Block {
	out := blocks[:0:0]
	for _, b := range blocks {
		if b.Type != llm.BlockToolCall {
			out = append(out, b)
		}
	}
	return out
}

func blank(s string) bool { return strings.TrimSpace(s) == "" }
