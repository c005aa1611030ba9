// Package registry is dshd's scoped tool registry and tool execution pipeline (the REG, SCH,
// SCP, PRS, GRD, PIPE, RES and APR rules of docs/rules.md): layers with shadowing, restrictions
// and presentation modes, guards, the Define DSL with its own SCH validator, and the prepare /
// dispatch / finalize / finish stages the scheduler drives.
package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
)

// PresentMode is how tools are presented to an agent (PRS-1).
type PresentMode string

// Presentation modes.
const (
	ModeNative PresentMode = "native"
	ModeCode   PresentMode = "code"
	ModeBoth   PresentMode = "both"
)

func (m PresentMode) valid() bool { return m == ModeNative || m == ModeCode || m == ModeBoth }

// Config configures a Registry. The zero value is usable apart from Scopes.
type Config struct {
	// Scopes is the scope tree that Input.Scope keys are looked up in; nil creates a private
	// tree.
	Scopes *kernel.ScopeTree
	// Logger receives contained listener failures and tool panics; nil discards.
	Logger *slog.Logger
	// Mode is the deployment default presentation mode (`tools.mode`); "" means native.
	Mode PresentMode
	// MaxParallelSubCalls caps run_code sub-calls (PRS-1); 0 means 10; negative is an error.
	MaxParallelSubCalls int
	// DefaultTimeoutMs bounds bodies of tools without TimeoutMs (E2); 0 means unbounded.
	DefaultTimeoutMs int
	// Approver resolves `ask` decisions (APR-1); nil means no approval service is mounted.
	Approver Approver
	// CommitOrderFunc returns the next file-mutation commitOrder for an agent (RES-6); nil uses
	// a per-registry counter starting at 1.
	CommitOrderFunc func(agent string) int64
}

// Hooks are the registry's events. Register listeners with kernel.Listen through a fiber so
// that they are scoped and undone with it.
type Hooks struct {
	// PreExecute decides allow / deny / ask (PIPE-4). Default: allow.
	PreExecute *kernel.Waterfall[*Execution, Decision]
	// Execute wraps the body (PIPE-8). A wrapper may pass a different context to next (its
	// signal is combined with the caller's) or return its own result without calling next.
	Execute *kernel.Waterfall[*Execution, *Result]
	// PostExecute decides accept / block (PIPE-15). Default: accept.
	PostExecute *kernel.Waterfall[*Call, PostDecision]
	// Result is notified once with every final result (PIPE-19); failures are contained.
	Result *kernel.Emit[*Call]
	// Change is emitted unfiltered on every register, unregister, restrict and presentAs
	// (REG-6); a failing listener vetoes the change (REG-7).
	Change *kernel.Emit[Change]
}

// Call pairs an execution with a result, for post-execute and tools/result listeners. The
// result must not be modified.
type Call struct {
	Exec   *Execution
	Result *Result
}

// Change describes a registry change (REG-6).
type Change struct {
	Kind  string // "register", "unregister", "restrict", "unrestrict", "present-as", "present-as-removed"
	Name  string // tool name, for register and unregister
	Scope string // scope key, "" for the global layer
}

// Registry is the scoped tool registry and pipeline. Safe for concurrent use; Dispatch may run
// concurrently for different executions.
type Registry struct {
	cfg      Config
	log      *slog.Logger
	scopes   *kernel.ScopeTree
	approver atomic.Pointer[approverBox]
	commit   atomic.Int64
	Hooks    Hooks

	mu      sync.RWMutex
	layers  map[*kernel.Scope]*layer // nil key = global layer
	runCode *entry
}

type approverBox struct{ a Approver }

// New returns an empty registry.
func New(cfg Config) (*Registry, error) {
	if cfg.Mode == "" {
		cfg.Mode = ModeNative
	}
	if !cfg.Mode.valid() {
		return nil, fmt.Errorf("registry: tools.mode must be native, code or both, not %q", cfg.Mode)
	}
	if cfg.MaxParallelSubCalls < 0 {
		return nil, fmt.Errorf("registry: maxParallelSubCalls must be a positive integer")
	}
	if cfg.MaxParallelSubCalls == 0 {
		cfg.MaxParallelSubCalls = 10
	}
	if cfg.DefaultTimeoutMs < 0 {
		return nil, fmt.Errorf("registry: default timeoutMs must be greater than 0")
	}
	if cfg.Scopes == nil {
		cfg.Scopes = kernel.NewScopeTree()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Registry{cfg: cfg, log: cfg.Logger, scopes: cfg.Scopes,
		layers: map[*kernel.Scope]*layer{nil: {}}}
	if cfg.Approver != nil {
		r.approver.Store(&approverBox{cfg.Approver})
	}
	r.Hooks = Hooks{
		PreExecute:  kernel.NewWaterfall("tools/pre-execute", allowDefault),
		Execute:     kernel.NewWaterfall("tools/execute", r.runBody),
		PostExecute: kernel.NewWaterfall("tools/post-execute", acceptDefault),
		Result:      kernel.NewEmit[*Call]("tools/result", r.log),
		Change:      kernel.NewUnfilteredEmit[Change]("tools/change", r.log),
	}
	return r, nil
}

// Config returns the registry's effective configuration (defaults applied).
func (r *Registry) Config() Config { return r.cfg }

// MountApprover installs a as the approval service (APR-1) and returns the disposer that
// unmounts it.
func (r *Registry) MountApprover(a Approver) kernel.Disposer {
	box := &approverBox{a}
	r.approver.Store(box)
	return kernel.Once(func() { r.approver.CompareAndSwap(box, nil) })
}

// DecisionKind is a pre-execute decision kind (PIPE-4).
type DecisionKind int

// Pre-execute decision kinds.
const (
	DecisionAllow DecisionKind = iota
	DecisionDeny
	DecisionAsk
)

// Decision is a pre-execute decision; the zero value is allow.
type Decision struct {
	Kind   DecisionKind
	Reason string // deny reason, or the optional ask reason
}

// Allow, Deny and Ask build decisions.
func Allow() Decision             { return Decision{} }
func Deny(reason string) Decision { return Decision{Kind: DecisionDeny, Reason: reason} }
func Ask(reason string) Decision  { return Decision{Kind: DecisionAsk, Reason: reason} }

func allowDefault(context.Context, *Execution) (Decision, error) { return Decision{}, nil }

// PostKind is a post-execute decision kind (PIPE-15).
type PostKind int

// Post-execute decision kinds.
const (
	PostAccept PostKind = iota
	PostBlock
)

// PostDecision is a post-execute decision; the zero value accepts unchanged.
type PostDecision struct {
	Kind PostKind
	// Content replaces the content on accept (nil keeps it).
	Content []llm.Block
	// Value replaces the value on accept of a success; it is re-validated and re-rendered.
	Value json.RawMessage
	// Feedback is the content of a block.
	Feedback []llm.Block
	// AdditionalContexts are appended on accept, and are the only contexts kept on block.
	AdditionalContexts []llm.Message
}

func acceptDefault(context.Context, *Call) (PostDecision, error) { return PostDecision{}, nil }
