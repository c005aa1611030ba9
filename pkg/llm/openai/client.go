// Package openai is dshd's own small client of the OpenAI chat-completions protocol, which
// DeepSeek, OpenAI, vLLM, Ollama and llama.cpp all speak. It implements llm.Provider: it
// converts an llm.Request to the wire, streams the answer (or reads a non-streamed one) and
// turns it into the chunk vocabulary of pkg/llm, retrying 429, 5xx and transport failures that
// happen before the response starts (Config.MaxAttempts; the agent loop builds its clients with
// 1 and retries itself, honouring llm.Error.RetryAfter), and mapping every failure to an
// *llm.Error.
package openai

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/dshd/dshd/pkg/llm"
)

// Defaults of Config.
const (
	DefaultBaseURL       = "https://api.deepseek.com"
	DefaultModel         = "deepseek-chat"
	DefaultMaxAttempts   = 4
	DefaultBaseBackoff   = 500 * time.Millisecond
	DefaultMaxBackoff    = 8 * time.Second
	DefaultMaxRetryAfter = 60 * time.Second
	DefaultIdleTimeout   = 3 * time.Minute
)

// maxErrorBody bounds how much of an error response body is read; maxResponseBody bounds a
// non-streamed response.
const (
	maxErrorBody    = 64 << 10
	maxResponseBody = 64 << 20
)

// Config configures a Client. The zero value talks to DeepSeek without an API key.
type Config struct {
	// BaseURL is the API root; requests go to BaseURL + "/chat/completions". Default
	// DefaultBaseURL (DeepSeek). For OpenAI use "https://api.openai.com/v1".
	BaseURL string
	// APIKey is sent as "Authorization: Bearer <key>" when not empty.
	APIKey string
	// Model is used when the request's Config.Model is empty. Default DefaultModel.
	Model string
	// MaxTokens is sent as max_tokens when the request's Config.MaxTokens is 0. Default 0:
	// the field is left out and the provider's default applies.
	MaxTokens int
	// NonStreaming asks for one complete response (stream: false) and converts it into the
	// same chunk sequence a stream would give. Default false.
	NonStreaming bool
	// MaxAttempts bounds the attempts of one call, the first included. Default
	// DefaultMaxAttempts (4); 1 disables retries (the returned *llm.Error still carries the
	// provider's Retry-After as RetryAfter, for a caller that retries).
	MaxAttempts int
	// BaseBackoff is the wait before the first retry; it doubles per retry up to MaxBackoff,
	// and each wait is drawn uniformly from [d/2, d]. Defaults DefaultBaseBackoff (500ms) and
	// DefaultMaxBackoff (8s).
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
	// MaxRetryAfter is the longest Retry-After the client waits for; a longer one ends the call
	// with the error. Default DefaultMaxRetryAfter (60s).
	MaxRetryAfter time.Duration
	// IdleTimeout ends a call with TIMEOUT when no byte (keep-alive comments included) arrives
	// for this long, while waiting for headers or mid-stream. Default DefaultIdleTimeout (3m);
	// negative disables it.
	IdleTimeout time.Duration
	// HTTPClient sends the requests. Default: a client on http.DefaultTransport without an
	// overall timeout (streams can be long; the context and IdleTimeout bound them) that does
	// not follow redirects: a 3xx ends the call with a non-retryable SERVER error carrying the
	// status, so neither the request nor its Authorization header ever reaches a host other than
	// BaseURL's. A caller-supplied client is used as it is, its CheckRedirect included: one that
	// follows redirects may send the request body (and, within the same domain, the key) on.
	HTTPClient *http.Client
	// SleepFunc waits d between attempts and returns early with ctx.Err(). Tests inject it so
	// that they don't wait. Default: a timer.
	SleepFunc func(ctx context.Context, d time.Duration) error
	// NowFunc is the clock used to read a Retry-After date. Default time.Now.
	NowFunc func() time.Time
	// Logger receives one debug line per retry. Default: discard.
	Logger *slog.Logger
}

// Client is an llm.Provider for an OpenAI-compatible endpoint. It is safe for concurrent use.
type Client struct {
	cfg   Config
	url   string
	tools toolCache // the encodings of the tool lists sent last
}

var _ llm.Provider = (*Client)(nil)

// New returns a Client with cfg's defaults filled in.
func New(cfg Config) *Client {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	if cfg.Model == "" {
		cfg.Model = DefaultModel
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.BaseBackoff <= 0 {
		cfg.BaseBackoff = DefaultBaseBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.MaxRetryAfter <= 0 {
		cfg.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{CheckRedirect: noRedirects}
	}
	if cfg.SleepFunc == nil {
		cfg.SleepFunc = llm.Sleep
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Client{cfg: cfg, url: strings.TrimRight(cfg.BaseURL, "/") + "/chat/completions"}
}

// noRedirects makes a client return a 3xx response as it is instead of following it.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Name returns the provider name, "openai".
func (c *Client) Name() string { return "openai" }

// Stream sends req and returns its stream once the provider answered 200. Failures before that
// (429, 5xx, connection errors) are retried up to MaxAttempts with backoff, honouring
// Retry-After; the last one is returned as an *llm.Error (or context.Canceled when ctx was
// cancelled). The caller must Close the stream.
func (c *Client) Stream(ctx context.Context, req llm.Request) (llm.Stream, error) {
	s, err := c.stream(ctx, req)
	if c.cfg.APIKey == "" {
		return s, err
	}
	if err != nil {
		return nil, maskKey(err, c.cfg.APIKey)
	}
	return &maskedStream{Stream: s, key: c.cfg.APIKey}, nil
}

// stream is Stream without the masking of the client's own key.
func (c *Client) stream(ctx context.Context, req llm.Request) (llm.Stream, error) {
	body, err := c.encode(req)
	if err != nil {
		return nil, fmt.Errorf("openai: encode request: %w", err)
	}
	for attempt := 1; ; attempt++ {
		s, err := c.attempt(ctx, body)
		if err == nil {
			return s, nil
		}
		wait, retry := c.retryWait(err, attempt)
		var e *attemptError
		isAttempt := errors.As(err, &e)
		if !retry {
			if !isAttempt {
				return nil, err
			}
			if e.err.Err != nil {
				// The message is generic (it reaches the tenant); the cause is for the operator.
				c.cfg.Logger.WarnContext(ctx, "llm call failed", "attempts", attempt, "err", maskKey(e.err, c.cfg.APIKey),
					"cause", c.redact(e.err.Err))
			}
			return nil, e.err
		}
		if isAttempt && e.err.Err != nil {
			c.cfg.Logger.DebugContext(ctx, "llm retry", "attempt", attempt, "wait", wait, "err", maskKey(err, c.cfg.APIKey),
				"cause", c.redact(e.err.Err))
		} else {
			c.cfg.Logger.DebugContext(ctx, "llm retry", "attempt", attempt, "wait", wait, "err", maskKey(err, c.cfg.APIKey))
		}
		if serr := c.cfg.SleepFunc(ctx, wait); serr != nil {
			return nil, readError(ctx, ctx, serr, "waiting to retry")
		}
	}
}

// encode returns the request body of req.
func (c *Client) encode(req llm.Request) ([]byte, error) {
	wr := c.wireRequest(req)
	var tools []byte
	if len(wr.Tools) > 0 {
		var err error
		if tools, err = c.tools.encode(req.Tools); err != nil {
			return nil, err
		}
	}
	return encodeRequest(wr, tools)
}

func (c *Client) wireRequest(req llm.Request) ChatRequest {
	wr := ChatRequest{
		Model:           orDefault(req.Config.Model, c.cfg.Model),
		Messages:        WireMessages(req.System, req.Messages),
		Tools:           WireTools(req.Tools),
		Stream:          !c.cfg.NonStreaming,
		MaxTokens:       c.cfg.MaxTokens,
		Temperature:     req.Config.Temperature,
		ReasoningEffort: req.Config.ReasoningEffort,
	}
	if req.Config.MaxTokens > 0 {
		wr.MaxTokens = req.Config.MaxTokens
	}
	if wr.ReasoningEffort == "off" {
		wr.ReasoningEffort = ""
	}
	if wr.Stream {
		wr.StreamOptions = &StreamOptions{IncludeUsage: true}
	}
	return wr
}

func orDefault(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// retryWait decides whether err is retried after attempt and how long to wait: Retry-After
// when the provider sent one, else exponential backoff with jitter.
func (c *Client) retryWait(err error, attempt int) (time.Duration, bool) {
	var e *attemptError
	if !errors.As(err, &e) || !e.err.Retryable || e.err.Code == llm.CodeTimeout || attempt >= c.cfg.MaxAttempts {
		return 0, false
	}
	if e.hasRetryAfter {
		return e.retryAfter, e.retryAfter <= c.cfg.MaxRetryAfter
	}
	d := c.cfg.BaseBackoff << (attempt - 1)
	if d > c.cfg.MaxBackoff || d <= 0 {
		d = c.cfg.MaxBackoff
	}
	return d/2 + rand.N(d/2+1), true
}

// attemptError is an *llm.Error of one attempt with the Retry-After that came with it.
type attemptError struct {
	err           *llm.Error
	retryAfter    time.Duration
	hasRetryAfter bool
}

func (e *attemptError) Error() string { return e.err.Error() }
func (e *attemptError) Unwrap() error { return e.err }

// attempt sends the request once. On a 200 it returns the stream, which then owns the
// attempt's context and idle timer.
func (c *Client) attempt(ctx context.Context, body []byte) (llm.Stream, error) {
	actx, cancel := context.WithCancelCause(ctx)
	idle := newIdleTimer(c.cfg.IdleTimeout, cancel)
	hreq, err := http.NewRequestWithContext(actx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		idle.stop()
		cancel(nil)
		return nil, fmt.Errorf("openai: build request: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	if c.cfg.NonStreaming {
		hreq.Header.Set("Accept", "application/json")
	}
	if c.cfg.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	resp, err := c.cfg.HTTPClient.Do(hreq)
	if err != nil {
		idle.stop()
		cancel(nil)
		return nil, asAttemptError(readError(ctx, actx, err, whatSend))
	}
	s, err := c.open(ctx, actx, cancel, idle, resp)
	if err != nil {
		idle.stop()
		cancel(nil)
		return nil, err
	}
	return s, nil
}

// open turns a response into a stream or an attempt error. A 200 with a JSON content type is
// read as a non-streamed response even when a stream was asked for.
func (c *Client) open(ctx, actx context.Context, cancel context.CancelCauseFunc, idle *idleTimer, resp *http.Response) (llm.Stream, error) {
	body := &idleReader{r: resp.Body, t: idle}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(body, maxErrorBody))
		e := &attemptError{err: statusError(resp.StatusCode, data)}
		e.retryAfter, e.hasRetryAfter = retryAfter(resp.Header.Get("Retry-After"), c.cfg.NowFunc())
		e.err.RetryAfter = e.retryAfter // for a caller that retries itself (MaxAttempts 1)
		return nil, e
	}
	if c.cfg.NonStreaming || strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		defer func() {
			resp.Body.Close()
			idle.stop()
			cancel(nil) // the chunks are in memory: the attempt is over
		}()
		data, err := io.ReadAll(io.LimitReader(body, maxResponseBody))
		if err != nil {
			return nil, asAttemptError(readError(ctx, actx, err, "read response"))
		}
		chunks, err := completionChunks(data)
		if err != nil {
			return nil, asAttemptError(err)
		}
		return &fixedStream{ctx: ctx, chunks: chunks}, nil
	}
	return newSSEStream(ctx, actx, cancel, idle, resp.Body, body), nil
}

func asAttemptError(err error) error {
	var e *llm.Error
	if errors.As(err, &e) {
		return &attemptError{err: e}
	}
	return err
}

// redact returns the text of an underlying error for a log line, with the client's key and
// anything that looks like a key masked, as in the errors themselves.
func (c *Client) redact(err error) string {
	msg := maskKeys(err.Error())
	if c.cfg.APIKey != "" {
		msg = redactKey(msg, c.cfg.APIKey)
	}
	return msg
}
