package codemode

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/registry"
)

// The run_code wire schema (CODE-1): TypeScript wording.
const (
	toolDescription = "Run a TypeScript program against the tools declared in the SDK of the system prompt. " +
		"`code` is the body of an async function: `await` and `return` work at its top level, and types are " +
		"erased without being checked. `description` says in a few words what the program does. Call tools as " +
		"`await tools.name(args)`. Only what the program prints with console.log and the value it returns come " +
		"back to you, so print or return just what you need; an image a tool returns is attached after the run."
	toolParameters = `{"type":"object","properties":{` +
		`"code":{"type":"string","description":"The program: the body of an async TypeScript function."},` +
		`"description":{"type":"string","description":"What the program does, in a few words and the active voice; ` +
		`it is shown to the user. For example: \"List the failing tests\" or \"Read the config and its schema\"."}},` +
		`"required":["code","description"]}`
)

// Messages of invalid run_code arguments (CODE-1; the description one is exact).
const (
	msgBadDescription = "invalid description: expected a non-empty string"
	msgBadCode        = "invalid code: expected a string"
)

// binding is run_code bound to a registry.
type binding struct {
	rt       *Runtime
	reg      *registry.Registry
	subCalls SubCallsFunc
	tenant   TenantFunc
}

// execute is the body of run_code: it strips the program, waits for a program slot (slots.go),
// runs it in a fresh engine with a bridge to the pipeline, settles the bridge and returns {logs, result} or CODE_RUN_FAILED
// (CODE-11, CODE-12).
func (b *binding) execute(ctx context.Context, exec *registry.Execution) (json.RawMessage, error) {
	code, err := parseArgs(exec.Args)
	if err != nil {
		return nil, err
	}
	cfg := &b.rt.cfg
	if len(code) > cfg.MaxSourceBytes {
		return nil, failedError(&runError{kind: KindException, msg: fmt.Sprintf("the program is %d bytes long; at most %d are allowed", len(code), cfg.MaxSourceBytes)}, nil)
	}
	js, rerr := strip(code)
	if rerr != nil {
		return nil, failedError(rerr, nil)
	}
	tk, werr := b.rt.waitSlot(ctx, b.tenantOf(exec.Agent))
	if werr != nil {
		return nil, failedError(werr, nil)
	}
	names := programTools(b.reg, exec.Scope.Key())
	br := newBridge(ctx, b.rt, b.reg, exec, names, b.limit(exec.Agent))
	// The run follows the call's own signal: the run signal, which the bridge may abort when the
	// run fails (bridge.halt), is the sub-calls'.
	out := run(ctx, cfg, js, names, br, &lease{q: b.rt.slots, tenant: b.tenantOf(exec.Agent), tk: tk})
	if err := br.close(); err != nil {
		return nil, fmt.Errorf("run_code: writing the sub-call log failed: %w", err)
	}
	if out.err != nil {
		return nil, failedError(out.err, out.logs)
	}
	logs := out.logs
	if logs == nil {
		logs = []string{}
	}
	return marshalNoEscape(Value{Logs: logs, Result: out.result})
}

// tenantOf is the tenant of agent, "" without a TenantFunc.
func (b *binding) tenantOf(agent string) string {
	if b.tenant == nil {
		return ""
	}
	return b.tenant(agent)
}

// limit is the sub-call cap of agent (PRS-1).
func (b *binding) limit(agent string) int {
	if b.subCalls != nil {
		if n := b.subCalls(agent); n > 0 {
			return n
		}
	}
	return b.reg.Config().MaxParallelSubCalls
}

// programTools are the names bound on `tools`: the scope's visible tools without run_code
// (CODE-4, CODE-13), sorted.
func programTools(reg *registry.Registry, scope string) []string {
	all := reg.Names(scope)
	names := all[:0:0]
	for _, n := range all {
		if n != registry.RunCodeName {
			names = append(names, n)
		}
	}
	return names
}

// parseArgs checks run_code's arguments (CODE-1) and returns the program.
func parseArgs(raw json.RawMessage) (string, error) {
	var args map[string]json.RawMessage
	if err := json.Unmarshal(raw, &args); err != nil || args == nil {
		return "", argsErr(msgBadCode)
	}
	code, ok := jsonString(args["code"])
	if !ok {
		return "", argsErr(msgBadCode)
	}
	if desc, ok := jsonString(args["description"]); !ok || strings.TrimSpace(desc) == "" {
		return "", argsErr(msgBadDescription)
	}
	return code, nil
}

// jsonString decodes raw when it is a JSON string.
func jsonString(raw json.RawMessage) (string, bool) {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

func argsErr(msg string) error {
	return &registry.Error{Name: registry.NameToolArgs, Code: fault.CodeInvalidArgs, Message: msg}
}
