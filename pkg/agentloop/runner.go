// Package agentloop runs a session's agent: turns and steps (LOOP rules), over a eventlog.Journal that is
// the session log. A Runner owns one session while it runs; the caller guarantees that no other
// Runner serves the same session at the same time (the PostgreSQL journal fences this with a
// lease). Other writers may append to the log meanwhile (inbox insertions, cancel requests): the
// runner folds their events in seq order.
package agentloop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/promptasm"
	"github.com/dshd/dshd/pkg/scheduler"
	"github.com/dshd/dshd/pkg/telemetry"
)

// Defaults of Config. The defaults of settings a preset also has are the preset's (declared
// once, in pkg/preset), so a caller that gives none runs what a preset that leaves them out runs.
const (
	DefaultMaxSteps      = preset.DefaultMaxSteps     // limits.maxSteps
	DefaultModelRetries  = preset.DefaultModelRetries // model.retries
	DefaultChunkWindow   = 50 * time.Millisecond
	DefaultChunkBytes    = 32 << 10
	DefaultRetryBackoff  = 250 * time.Millisecond
	DefaultMaxRetryDelay = 60 * time.Second
	// DefaultMaxOutputBytes and DefaultMaxToolCalls bound one model response.
	DefaultMaxOutputBytes = 4 << 20
	DefaultMaxToolCalls   = 128
)

// Config is the fixed configuration of one session's agent, resolved from its preset.
type Config struct {
	// SessionID is the agent's identity on tool executions and the request's session id.
	SessionID string
	// Scope is the tool registry scope of the agent (its preset's tools, restrictions, mode).
	Scope string
	// Model is the model configuration; it is what `request/header` records (no secrets), with
	// the unset fields ModelDefaults fills.
	Model llm.Config
	// ModelDefaults are the provider's defaults: MaxTokens and ReasoningEffort fill what Model
	// leaves unset (sent with the request, recorded in `request/header` and marked in its
	// adapterDefaults), ContextWindow goes into `request/context`. Zero: none.
	ModelDefaults llm.Defaults
	// Provider streams model calls.
	Provider llm.Provider
	// Prompt assembles the system prompt and wire tools; PromptInput carries the chain, mode,
	// tool order and cwd (Provider and Model are filled from Model).
	Prompt      *promptasm.Registry
	PromptInput promptasm.Input
	// Tools is the tool pipeline (a *registry.Registry); Scheduler runs a step's calls over it.
	Tools     scheduler.Pipeline
	Scheduler *scheduler.Scheduler
	// MaxSteps bounds the steps of one turn; the turn then ends with error MAX_STEPS.
	// Default DefaultMaxSteps.
	MaxSteps int
	// ChunkWindow and ChunkBytes bound how long and how much streamed output may wait before it
	// is written: at most one batch of `assistant/chunk` events per window or size, with adjacent
	// deltas of a block merged. Defaults DefaultChunkWindow and DefaultChunkBytes.
	ChunkWindow time.Duration
	ChunkBytes  int
	// ModelRetries is how often a retryable model failure (llm.Error.Retryable: RATE_LIMIT,
	// SERVER 5xx, TRANSPORT, TIMEOUT) is retried within its step; each retry is logged as
	// `llm/retry` before the wait. The wait is the provider's Retry-After when it sent one,
	// else RetryBackoff doubling with each retry, at most MaxRetryDelay; a Retry-After longer
	// than MaxRetryDelay is not waited for (the step fails). nil: DefaultModelRetries; 0 (or
	// negative): no retries. Defaults DefaultRetryBackoff and DefaultMaxRetryDelay.
	ModelRetries  *int
	RetryBackoff  time.Duration
	MaxRetryDelay time.Duration
	// MaxOutputBytes and MaxToolCalls bound one model response (text, reasoning and arguments;
	// tool calls): a response past them fails the step with SERVER, so a broken or hostile model
	// endpoint cannot fill memory or the log. Defaults DefaultMaxOutputBytes and
	// DefaultMaxToolCalls.
	MaxOutputBytes int
	MaxToolCalls   int
	// Clock and Logger; defaults time.Now and slog.Default().
	Clock  func() time.Time
	Logger *slog.Logger
	// NewID returns fresh message ids. Default: random UUIDs.
	NewID func() string
	// AfterAssistantFunc, when set, is called with every assembled assistant message right after
	// it is staged and before its tool calls run: the in-process analogue of a `session/event`
	// listener on `assistant/message` (tests use it to cancel before tools start).
	AfterAssistantFunc func(llm.Message)
	// Metrics records turns, steps, model and tool calls and crash repairs; nil records nothing.
	Metrics *telemetry.Metrics
	// Tracer, when set, traces every turn: a root span per turn (and per crash repair) with
	// step, model call and tool call spans below it (docs/observability.md). Nil: no spans.
	Tracer trace.Tracer
	// TenantID is the session's tenant, recorded on the turn's span only.
	TenantID string
	// Admit, when set, is asked before a turn's first step whether the turn may run (a tenant's
	// token quota): a non-nil error ends the turn at once with it (turn/end {kind: error}),
	// consuming the input it was woken for as a prompt failure does (PRM-8), without calling the
	// model. It decides itself what a failure to find out means (nil: run).
	Admit func(ctx context.Context) *eventlog.TurnError
	// Observe, when set, is called with every committed event the runner reads into its view of
	// the log, in seq order, before the runner acts on it (its own events and other writers'):
	// it lets the agent's configuration follow facts the log states (the session's approval
	// policy). It must be quick and must not call the runner.
	Observe func(eventlog.Event)
	// Park, when set, lets turns park (E6) while they wait only on something outside the server;
	// nil: an ask blocks the turn and a client-executed tool fails server-side.
	Park *ParkConfig
}

func (c Config) withDefaults() Config {
	if c.MaxSteps <= 0 {
		c.MaxSteps = DefaultMaxSteps
	}
	if c.ChunkWindow <= 0 {
		c.ChunkWindow = DefaultChunkWindow
	}
	if c.ChunkBytes <= 0 {
		c.ChunkBytes = DefaultChunkBytes
	}
	retries := DefaultModelRetries
	if c.ModelRetries != nil {
		retries = max(*c.ModelRetries, 0)
	}
	c.ModelRetries = &retries // a copy: the caller's pointer is not shared
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	if c.MaxRetryDelay <= 0 {
		c.MaxRetryDelay = DefaultMaxRetryDelay
	}
	if c.MaxOutputBytes <= 0 {
		c.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if c.MaxToolCalls <= 0 {
		c.MaxToolCalls = DefaultMaxToolCalls
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.NewID == nil {
		c.NewID = uuid.NewString
	}
	return c
}

// CancelError is the cancellation cause a caller gives the turn context
// (context.WithCancelCause) to say why the turn is aborted. Any other cause reads as `user`.
type CancelError struct{ Cause Cause }

func (e *CancelError) Error() string { return "turn cancelled: " + e.Cause.Kind }

// Runner serves one session. It is not safe for concurrent use.
type Runner struct {
	cfg Config
	j   eventlog.Journal
	m   *mirror
	w   *writer
	// model is cfg.Model with the provider's defaults filled in, and marks the fields they
	// filled: what requests are sent with and `request/header` records.
	model    llm.Config
	defaults map[string]bool
	// headerLogged is true once this runner logged a request/header (LOOP-3: the first request
	// of a loop instance always logs one).
	headerLogged bool
	// stagedHeader and stagedCtx are the last request/header and request/context staged by this
	// runner, possibly not yet committed.
	stagedHeader *stagedHeader
	stagedCtx    *stagedContext
	// intr cancels the running turn (Interrupt, or an `agent/cancel` folded during the turn).
	intr interrupter
	// claimed counts the inbox messages this runner's turns have claimed.
	claimed int
	// unclaimed counts the front messages of each inbox list that a staged claim takes but that
	// are not yet written: the runner's view of the inbox is the mirror's less these. Every
	// flush writes the staged claim, and resets it.
	unclaimed eventlog.InboxLens
	// claimLost is set by a claim that found its messages cleared by a cancel when it was
	// written: the turn was cancelled before anything of it was in the log.
	claimLost bool
	// steps counts the steps of the running turn (metrics).
	steps int
	// spanCtx is the span context of the running or last traced (sampled) turn, for the log lines
	// of the worker serving it (SpanContext); read from other goroutines.
	spanCtx atomic.Pointer[trace.SpanContext]
	// handover is set by Handover: the runner hands its turn over at the next step boundary.
	handover atomic.Bool
	// finish is set by Finish: Serve opens and resumes no further turn.
	finish atomic.Bool
	// parkReason is the reason of the turn/parked the running turn staged last (metrics).
	parkReason string
}

// SpanContext returns the span context of the runner's running turn, or of its last one, and
// false when none was traced and sampled (an unsampled span is not exported). Safe for
// concurrent use.
func (r *Runner) SpanContext() (trace.SpanContext, bool) {
	if sc := r.spanCtx.Load(); sc != nil {
		return *sc, true
	}
	return trace.SpanContext{}, false
}

// TraceContext returns ctx carrying the span context of the runner's running or last turn, so
// that a log line written with it carries that turn's trace id (telemetry.LogHandler). ctx as
// it is when no turn was traced.
func (r *Runner) TraceContext(ctx context.Context) context.Context {
	if sc, ok := r.SpanContext(); ok {
		return trace.ContextWithSpanContext(ctx, sc)
	}
	return ctx
}

// NewRunner returns a runner of the session behind j.
func NewRunner(cfg Config, j eventlog.Journal) *Runner {
	cfg = cfg.withDefaults()
	m := newMirror()
	m.observe = cfg.Observe
	model, defaults := cfg.ModelDefaults.Apply(cfg.Model)
	r := &Runner{cfg: cfg, j: j, m: m, w: newWriter(j, m, cfg.Clock), model: model, defaults: defaults}
	r.w.flushed = func() { r.unclaimed = eventlog.InboxLens{} }
	return r
}

// Load folds every committed event the runner has not seen.
func (r *Runner) Load(ctx context.Context) error { return r.w.refresh(ctx) }

// Pending reports whether the inbox holds messages that a wake should serve.
func (r *Runner) Pending() bool {
	return len(r.waiting(eventlog.InboxNextTurn)) > 0 || len(r.waiting(eventlog.InboxNextStep)) > 0
}

// Cursor returns the seq of the last event the runner has seen.
func (r *Runner) Cursor() int64 { return r.m.cursor() }

// LogBytes returns the size of the event data the runner's view of the log holds.
func (r *Runner) LogBytes() int {
	if r.m == nil {
		return 0
	}
	return r.m.bytes
}

// Flushes returns how many batches the runner has committed.
func (r *Runner) Flushes() int { return r.w.flushes }

// Repair closes a turn that a crashed runner left open (SES-14) and reports whether it did.
//
// A repair is traced as a trace of its own (a root span dshd.turn.repair): the turn it closes
// was traced, if at all, by the replica that crashed.
func (r *Runner) Repair(ctx context.Context) (bool, error) {
	turn, open := r.m.log.OpenTurn()
	if !open {
		return false, nil
	}
	if _, parked := r.Parked(); parked {
		return false, nil // a parked turn is not open work (E6)
	}
	ctx, span := r.startRoot(ctx, "dshd.turn.repair", turn)
	var first, last *handle
	for _, ev := range r.m.log.Closers() {
		s := staged{typ: ev.Type, data: ev.Data, surface: ev.SurfaceOp != nil, time: ev.Time}
		for _, seq := range ev.SourceEventSeqs {
			s.cites = append(s.cites, &handle{seq: seq, idx: -1})
		}
		last = r.w.stage(s)
		if first == nil {
			first = last
		}
	}
	err := r.w.flush(ctx)
	if err == nil {
		r.cfg.Metrics.CrashRepair()
		r.cfg.Logger.InfoContext(ctx, "crash repair closed an open turn", "session", r.cfg.SessionID, "turn", turn)
	}
	endSpan(span, first, last, err)
	return true, err
}

// startRoot starts a root span of the runner's tracer (a turn or a repair), or returns ctx with
// no span when tracing is off.
func (r *Runner) startRoot(ctx context.Context, name string, turn int64) (context.Context, trace.Span) {
	if r.cfg.Tracer == nil {
		return ctx, noSpan // never a span of the caller's, which this runner must not end
	}
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithAttributes(
		telemetry.AttrSession.String(r.cfg.SessionID), telemetry.AttrTenant.String(r.cfg.TenantID),
		telemetry.AttrTurn.Int64(turn))}
	if name == telemetry.OperationInvokeAgent {
		// The GenAI agent conventions; the conversation is the session.
		opts = append(opts, trace.WithAttributes(telemetry.AttrOperation.String(telemetry.OperationInvokeAgent),
			telemetry.AttrConversationID.String(r.cfg.SessionID)))
		// The request that posted the message this turn serves (its own trace: the turn outlives it).
		if l, ok := telemetry.TakeTurnLink(ctx); ok {
			opts = append(opts, trace.WithLinks(l))
		}
	}
	ctx, span := r.cfg.Tracer.Start(ctx, name, opts...)
	// An unsampled turn's trace id leads nowhere: the worker's lines of it get none (and not the
	// last sampled turn's either).
	if telemetry.Sampled(span) {
		sc := span.SpanContext()
		r.spanCtx.Store(&sc)
	} else {
		r.spanCtx.Store(nil)
	}
	return ctx, span
}

// noSpan is the span of a turn that is not traced: it records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// endSpan ends a span with the seq range of the events it wrote (the handles' committed seqs).
func endSpan(span trace.Span, first, last *handle, err error) {
	if !span.IsRecording() {
		return
	}
	if first != nil && first.seq >= 0 {
		span.SetAttributes(telemetry.AttrSeqFirst.Int64(first.seq))
	}
	if last != nil && last.seq >= 0 {
		span.SetAttributes(telemetry.AttrSeqLast.Int64(last.seq))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "session log unavailable")
	}
	span.End()
}

// Serve loads the log, repairs an interrupted turn, then runs turns while the inbox holds
// messages. A turn ended by cancellation stops serving: messages kept in the inbox wait for the
// next wake. Serve returns the reasons of the turns it ran.
func (r *Runner) Serve(ctx context.Context) ([]Reason, error) {
	if err := r.Load(ctx); err != nil {
		return nil, err
	}
	if _, err := r.Repair(ctx); err != nil {
		return nil, err
	}
	var reasons []Reason
	for ctx.Err() == nil {
		// Fold what others appended since (a cancel may have cleared the inbox) before deciding
		// to open a turn.
		if err := r.w.catchUp(ctx); err != nil {
			return reasons, err
		}
		if r.handingOver() || r.finish.Load() {
			break // a draining replica opens and resumes no turn: the next lease holder does
		}
		if p, parked := r.Parked(); parked {
			// A parked turn waits for its answers: what the inbox holds waits for its end. Once it
			// can resume, this serve resumes it (E6).
			if !p.Resolvable() {
				break
			}
			reason, err := r.ResumeTurn(ctx, p)
			if err != nil {
				return reasons, err
			}
			reasons = append(reasons, reason)
			if reason.Kind == EndParked || reason.Kind == eventlog.EndAborted || released(r.j) {
				break
			}
			continue
		}
		if !r.Pending() {
			break
		}
		claimedBefore := r.claimed
		reason, err := r.RunTurn(ctx)
		if err != nil {
			return reasons, err
		}
		reasons = append(reasons, reason)
		if reason.Kind == EndParked || reason.Kind == eventlog.EndAborted || released(r.j) {
			break
		}
		if r.claimed == claimedBefore && reason.Kind != eventlog.EndCompleted {
			// The turn took nothing from the inbox and did not complete: serving again would
			// repeat it. What waits is served at the next wake.
			break
		}
	}
	return reasons, nil
}

// Releaser is implemented by journals whose last append of a turn may give up the writer's run
// lease (pgstore.Journal.ReleaseAtTurnEnd): once Released, the runner stops serving, and what
// arrives later is for the lease's next holder.
type Releaser interface {
	Released() bool
}

func released(j eventlog.Journal) bool {
	rel, ok := j.(Releaser)
	return ok && rel.Released()
}

// errLog marks a failure to write the log: the turn cannot be closed through the log either.
var errLog = errors.New("agentloop: session log unavailable")

func (r *Runner) logErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", errLog, err)
}

func (r *Runner) newID() string { return r.cfg.NewID() }

// now returns the runner's clock in epoch milliseconds.
func (r *Runner) now() time.Time { return r.cfg.Clock() }
