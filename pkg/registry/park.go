package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

// ErrParked, returned (possibly wrapped) by an Approver, says the ask is committed and the call
// waits outside the server: Prepare returns a Prepared of kind PrepPark, with no
// result; the turn parks and a later loop instance resumes the call (Input.Resumed).
var ErrParked = errors.New("registry: the call is parked until its answer is in the log")

// Resumed is the resume input of a call of a parked turn. Exactly one field is set.
type Resumed struct {
	// Ask: the call had decided ask (with Reason) before the park; Prepare skips pre-execute
	// and goes straight to the approval, which finds the logged decision, then the guards.
	Ask *ResumedAsk
	// Client: a client-executed call was fully prepared before the park; Prepare skips
	// pre-execute, approval and guards, and Dispatch turns this result into the call's result
	// inside the tools/execute wrappers.
	Client *eventlog.ClientResult
	// Aborted: a client-executed call was fully prepared before the park and the turn was
	// cancelled before its result came; Dispatch gives it the ABORTED result of a started call
	// (PIPE-14) inside the tools/execute wrappers.
	Aborted bool
}

// ResumedAsk is the logged ask decision of a resumed call.
type ResumedAsk struct{ Reason string }

// MaxClientParameters bounds the raw parameters schema of a client-executed tool.
const MaxClientParameters = 64 << 10

// ClientSpec declares a client-executed tool: the server never runs its body; the client
// posts each call's result.
type ClientSpec struct {
	Name        string
	Description string
	// Parameters is the raw JSON Schema of the arguments, passed through (REG-3, SCH-10) after
	// a lossless-JSON and size check.
	Parameters json.RawMessage
	// TimeoutMs bounds the wait for the client's result (E2); 0 means the registry's default.
	TimeoutMs int
}

// ClientTool returns the raw tool of a client-executed tool: concurrency-safe, with a body that
// refuses to run server-side (a runner that cannot park, or a nested run_code call, gets a clear
// failure instead of a hang).
func ClientTool(s ClientSpec) (*Tool, error) {
	if s.Name == RunCodeName {
		return nil, fmt.Errorf("registry: tool name %q is reserved", RunCodeName)
	}
	if strings.TrimSpace(s.Name) == "" {
		return nil, fmt.Errorf("registry: tool name must be non-empty")
	}
	if s.TimeoutMs < 0 {
		return nil, fmt.Errorf("registry: client tool %q: timeoutMs must be a finite number greater than 0", s.Name)
	}
	params := s.Parameters
	if params == nil {
		params = json.RawMessage(`{"type":"object"}`)
	}
	if len(params) > MaxClientParameters {
		return nil, fmt.Errorf("registry: client tool %q: parameters exceed %d bytes", s.Name, MaxClientParameters)
	}
	if !lossless(params) {
		return nil, fmt.Errorf("registry: client tool %q: parameters are not lossless JSON", s.Name)
	}
	name := s.Name
	t := &Tool{
		Name:        s.Name,
		Description: s.Description,
		Parameters:  append(json.RawMessage(nil), params...),
		TimeoutMs:   s.TimeoutMs,
		Output:      &Output{Render: renderClient},
		Execute: func(context.Context, *Execution) (json.RawMessage, error) {
			return nil, fmt.Errorf("tool %q is executed by the client and cannot run here", name)
		},
		IsConcurrencySafe: func(json.RawMessage) bool { return true },
		Parallel:          true,
		Client:            true,
	}
	return t, nil
}

// renderClient renders a client result's value: the value is the content blocks the client
// posted, as JSON.
func renderClient(_, value json.RawMessage) ([]llm.Block, error) {
	var blocks []llm.Block
	if err := json.Unmarshal(value, &blocks); err != nil {
		return nil, err
	}
	return blocks, nil
}

// clientResult turns a client's posted result into the call's canonical result: a timeout
// is the E2 failure, an error result a failure with the client's text, a success its content
// (the value is the content blocks, so output rendering and meta stay uniform).
func (r *Registry) clientResult(e *Execution, t *entry, c *eventlog.ClientResult, timeoutMs int) *Result {
	if c.TimedOut {
		return timeoutResult(timeoutMs)
	}
	if c.IsError {
		var b strings.Builder
		for _, blk := range c.Content {
			if blk.Text != "" {
				if b.Len() > 0 {
					b.WriteString("\n")
				}
				b.WriteString(blk.Text)
			}
		}
		msg := b.String()
		if msg == "" {
			msg = fmt.Sprintf("tool %q failed on the client", e.Name)
		}
		return failure(msg, nil)
	}
	content := c.Content
	if content == nil {
		content = []llm.Block{}
	}
	val, err := json.Marshal(content)
	if err != nil {
		return failure("the client's result could not be encoded: "+errMessage(err), nil)
	}
	return r.canonicalize(e, t, val)
}

// Client reports whether the prepared call is of a client-executed tool.
func (p *Prepared) Client() bool { return p.tool != nil && p.tool.Client }

// AwaitsClient reports whether the prepared call is a client-executed call to dispatch that
// has no result yet: a turn that can park parks it instead of dispatching it (its body would
// only fail server-side).
func (p *Prepared) AwaitsClient() bool {
	return p.Kind == PrepDispatch && p.Client() && p.client == nil && !p.clientAborted && p.Exec.Parent == nil
}

// IsClient reports whether in names a client-executed tool in its scope (a call the model
// makes of it forms, with the client calls next to it, a group of its own).
func (r *Registry) IsClient(in Input) bool {
	if in.Parent != nil {
		return false
	}
	scope, _ := r.scopes.Lookup(in.Scope)
	r.mu.RLock()
	defer r.mu.RUnlock()
	t := r.resolveLocked(in.Name, scope)
	return t != nil && t.Client && r.modeLocked(scope) != ModeCode
}

// TimeoutMs returns the call's timeout in milliseconds (the tool's, else the registry's default;
// 0: none).
func (p *Prepared) TimeoutMs() int { return p.timeoutMs }
