package registry

import (
	"context"
	"encoding/json"
	"github.com/dshd/dshd/pkg/eventlog"
	"sync"
	"sync/atomic"

	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
)

// Input is one tool call handed to the pipeline (the scheduler contract).
type Input struct {
	CallID string
	Name   string
	// Args is the call's lossless JSON value; it is copied once (PIPE-1).
	Args json.RawMessage
	// Scope is the caller's scope key; "" is unscoped.
	Scope string
	// Agent is the calling agent; "" is no agent.
	Agent      string
	Location   Location
	RootCallID string // "" defaults to CallID
	// Parent is the token of the outer execution for nested (run_code) calls; nil at top level.
	Parent *Token
	// Log is the session log the call may write to while it runs (Execution.Commit); nil for a
	// call outside a session.
	Log Recorder
	// Park lets the call's ask park (ApprovalRequest.Park); ignored for nested calls.
	Park bool
	// Resumed is set for a call of a parked turn that is resumed; nil otherwise.
	Resumed *Resumed
}

// Token is an execution's opaque identity (PIPE-1); it is never serialised.
type Token struct{ exec *Execution }

// Execution is one call travelling through the pipeline. Its exported fields are fixed at
// creation and must not be modified; the methods are safe for concurrent use by the body.
type Execution struct {
	CallID     string
	Name       string
	RootCallID string
	Agent      string
	Scope      *kernel.Scope
	Location   Location
	Parent     *Token
	// Args is the copied lossless arguments (PIPE-1); never modify it.
	Args json.RawMessage

	token   Token
	started atomic.Bool

	mu        sync.Mutex
	inBody    bool
	bodyCtx   []llm.Message
	wrapCtx   []llm.Message
	mutations []FileMutation
	concludes bool
	reg       *Registry
	prep      *Prepared
	log       Recorder
	park      bool
}

// Token returns the execution's token, for nested calls' Input.Parent.
func (e *Execution) Token() *Token { return &e.token }

// Started reports whether the body was started (PIPE-14).
func (e *Execution) Started() bool { return e.started.Load() }

// DeferContext adds a message to be delivered after the batch (LOOP-6). Contexts added while the
// body runs come before those added by wrappers and other stages (PIPE-13).
func (e *Execution) DeferContext(m llm.Message) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inBody {
		e.bodyCtx = append(e.bodyCtx, m)
	} else {
		e.wrapCtx = append(e.wrapCtx, m)
	}
}

// ConcludeTurn marks a success as ending the turn (RES-5); a failure discards the mark.
func (e *Execution) ConcludeTurn() {
	e.mu.Lock()
	e.concludes = true
	e.mu.Unlock()
}

// RecordFileMutation records a committed file change (RES-6): Version 1 and the next
// commitOrder. Mutations are attached to the final result whatever it is (PIPE-18).
func (e *Execution) RecordFileMutation(m FileMutation) {
	m.Version = 1
	m.CommitOrder = e.reg.nextCommitOrder(e.Agent)
	e.mu.Lock()
	e.mutations = append(e.mutations, m)
	e.mu.Unlock()
}

func (e *Execution) setInBody(v bool) {
	e.mu.Lock()
	e.inBody = v
	e.mu.Unlock()
}

// contexts returns the deferred contexts in PIPE-13 order.
func (e *Execution) contexts() []llm.Message {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.wrapCtx) == 0 {
		return e.bodyCtx
	}
	return append(append([]llm.Message(nil), e.bodyCtx...), e.wrapCtx...)
}

func (e *Execution) finalState() (muts []FileMutation, concludes bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mutations, e.concludes
}

// Prepared is a call after the prepare stage. Kind says what the scheduler does next.
type Prepared struct {
	Kind PrepKind
	Exec *Execution

	exec      Execution
	result    *Result // PrepPostResult, PrepFinalResult
	tool      *entry  // resolved at creation; nil if unknown
	finalize  func(*Execution, *Result) ([]llm.Block, error)
	timeoutMs int
	dispCtx   context.Context
	canonical *Result
	settled   Settled
	client    *eventlog.ClientResult // a resumed client call's posted result
	// clientAborted: a resumed client call whose turn was cancelled before its result came.
	clientAborted bool
}

// Result returns the prepared result of a PrepPostResult or PrepFinalResult call (nil for
// PrepDispatch). It is not final yet.
func (p *Prepared) Result() *Result { return p.result }

// Settled is a dispatched call waiting for Finalize.
type Settled struct {
	p      *Prepared
	result *Result
	final  bool // skips post-execute (PIPE-11)
}

// Prepared returns the prepared call this settled from.
func (s *Settled) Prepared() *Prepared { return s.p }
