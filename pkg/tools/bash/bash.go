// Package bash is the `bash` tool: a fresh `bash -c` per call in the session's workspace, run by
// a sandbox.Provider (bwrap by default, local only when the operator enabled it). The output is
// stdout, then a `[stderr]` section; a non-zero exit adds `[exit code: N]` and is not an error; a
// timeout adds `[timed out after Nms]`; output beyond the provider's cap is counted, not kept; a
// command that leaves the session's tenant over its workspace bound adds a
// `[workspace quota exceeded (FS_QUOTA_EXCEEDED) ...]` note, and one that takes it over the bound
// while it runs is stopped by a watchdog (watchdog.go) with a `[stopped: ... (FS_QUOTA_EXCEEDED)
// ...]` note; a command the kernel killed at its memory cgroup's bound gets a `[killed: out of
// memory ...]` note. Commands have no network unless the
// definition is one with Config.Network (a preset's tools.bash.network).
package bash

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"time"

	"github.com/dshd/dshd/pkg/fairq"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/sandbox"
)

// Config configures the bash tool.
type Config struct {
	// Shell runs the commands. Required.
	Shell sandbox.Provider
	// Workspaces holds the sessions' workspaces. Required.
	Workspaces *sandbox.Workspaces
	// Network gives the commands the egress network (bwrap: public addresses only, through pasta;
	// pkg/sandbox egress.go) and says so in the description. The agents register such a definition only for presets whose
	// tools.bash.network is on (pkg/agents); default false: no network.
	Network bool
	// DefaultTimeout bounds a call without timeoutMs. Default DefaultTimeout.
	DefaultTimeout time.Duration
	// MaxTimeout caps timeoutMs. Default MaxTimeout.
	MaxTimeout time.Duration
	// Slots bounds the commands that run at once, in total and per tenant (limit.go); share one
	// queue between every definition of the process. nil: no bound.
	Slots *fairq.Queue

	onQueued func() // tests: called when a command starts waiting for a slot
}

// Timeouts.
const (
	DefaultTimeout = 120 * time.Second
	MaxTimeout     = 600 * time.Second
)

// Args are the arguments of `bash`.
type Args struct {
	Command     string `json:"command" jsonschema:"required,description=The bash command line to run."`
	Description string `json:"description" jsonschema:"required,description=What the command does, in a few words."`
	TimeoutMs   *int   `json:"timeoutMs,omitempty" jsonschema:"description=Timeout in milliseconds (default 120000, at most 600000)."`
	Workdir     string `json:"workdir,omitempty" jsonschema:"description=The working directory, relative to the workspace. Default: the workspace."`
}

// Tool returns a fresh definition of `bash`.
func Tool(cfg Config) (*registry.Tool, error) {
	if cfg.Shell == nil || cfg.Workspaces == nil {
		return nil, errors.New("bash: Shell and Workspaces are required")
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = DefaultTimeout
	}
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = MaxTimeout
	}
	t := tool{cfg}
	return registry.Define(registry.DefineSpec[Args, string]{
		Name:        "bash",
		Description: description(cfg),
		// The tool's own timeout reports first; the registry's bound is a backstop.
		TimeoutMs:   int((cfg.MaxTimeout + 30*time.Second).Milliseconds()),
		PresentCall: func(a Args) string { return a.Description },
	}, t.run)
}

func description(cfg Config) string {
	common := fmt.Sprintf("Each call is a fresh `bash -c` (no state is kept between calls except files). "+
		"Output is stdout, then [stderr]; a non-zero exit is reported as [exit code: N]. Default timeout %dms, at most %dms; "+
		"at most %d KiB of each stream is kept.", cfg.DefaultTimeout.Milliseconds(), cfg.MaxTimeout.Milliseconds(),
		sandbox.DefaultOutputBytes>>10)
	if cfg.Shell.Name() == "local" {
		return "Run a shell command on the host (local mode, for single-user development: no isolation, the " +
			"host's network), in the session's workspace directory, with a minimal environment. " + common
	}
	network := "there is no network"
	if cfg.Network {
		network = "the network is on for public internet addresses only (commands may open connections " +
			"and resolve names; the host, loopback other than the sandbox's own, private and link-local " +
			"addresses and cloud metadata services are unreachable, and nothing can connect in)"
	}
	return "Run a shell command in a bubblewrap sandbox (mode: " + cfg.Shell.Name() + "): the session's workspace is " +
		sandbox.WorkspacePath + " (writable, the default working directory), the system is read-only, " + network +
		", and processes, CPU time and memory are limited. " + common
}

type tool struct{ cfg Config }

func argsError(format string, args ...any) error {
	return registry.NewError(registry.NameToolArgs, fault.CodeInvalidArgs, "invalid arguments: "+format, args...)
}

func (t tool) run(ctx context.Context, exec *registry.Execution, a Args) (string, error) {
	if strings.TrimSpace(a.Command) == "" {
		return "", argsError(`"command" must be a non-empty string`)
	}
	if strings.TrimSpace(a.Description) == "" {
		return "", argsError(`"description" must be a non-empty string`)
	}
	timeout := t.cfg.DefaultTimeout
	if a.TimeoutMs != nil {
		if *a.TimeoutMs <= 0 {
			return "", argsError(`"timeoutMs" must be a positive integer`)
		}
		timeout = min(time.Duration(*a.TimeoutMs)*time.Millisecond, t.cfg.MaxTimeout)
	}
	if exec.Agent == "" {
		return "", registry.NewError("FsError", sandbox.CodeSandboxDenied, "the call has no session, so no workspace")
	}
	ws, err := t.cfg.Workspaces.Open(exec.Agent)
	if err != nil {
		return "", fmt.Errorf("bash: the workspace cannot be opened")
	}
	defer ws.Close()
	dir, err := workdir(ws, a.Workdir)
	if err != nil {
		return "", err
	}
	release, left, err := t.waitSlot(ctx, ws, timeout)
	if err != nil {
		return "", err
	}
	defer release()
	if left <= 0 {
		return t.notRun(timeout), nil
	}
	spec := sandbox.Spec{Command: a.Command, Workspace: ws.Dir, Dir: dir, Timeout: left, Network: t.cfg.Network}
	cmdCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var dog *watchdog
	if used, limit, ok := room(ws); ok {
		spec.Limits.FileBytes = fileLimit(limit - used)
		dog = watch(cmdCtx, ws, limit, stop)
	}
	res, err := t.cfg.Shell.Run(cmdCtx, spec)
	stop(nil)
	if dog != nil {
		dog.wait()
	}
	switch {
	case ctx.Err() != nil:
		return "", registry.NewError(registry.NameAbort, fault.CodeAborted, "tool call aborted")
	case err != nil && errors.Is(context.Cause(cmdCtx), errOverQuota): // the watchdog stopped it (not: fired after it ended)
		res.ExitCode = 0 // the kill's, not the command's: the note says why it ended
		return render(res, left) + stoppedNote(ws), nil
	case err != nil:
		return "", fmt.Errorf("bash: the command could not be run: %v", err)
	}
	return render(res, left) + fileLimitNote(res, spec.Limits.FileBytes) + quotaNote(ws), nil
}

// stoppedNote says that the watchdog stopped the command, and how much the tenant holds now.
func stoppedNote(ws *sandbox.Workspace) string {
	used, _, _, err := ws.TenantUsageAfresh()
	if err != nil {
		return fmt.Sprintf("\n[stopped: the command took this tenant's workspaces over their bound (%s) of %d bytes; "+
			"write and edit are refused until files are removed]", sandbox.CodeQuotaExceeded, ws.TenantQuota())
	}
	return fmt.Sprintf("\n[stopped: the command took this tenant's workspaces over their bound (%s): they hold %d bytes, more than the %d allowed; "+
		"write and edit are refused until files are removed]", sandbox.CodeQuotaExceeded, used, ws.TenantQuota())
}

// fileLimitNote explains an exit by SIGXFSZ when the file size limit was the tenant's room.
func fileLimitNote(res sandbox.Result, limit int64) string {
	if limit == 0 || res.ExitCode != 128+int(syscall.SIGXFSZ) {
		return ""
	}
	return fmt.Sprintf("\n[a file reached the size limit of %d bytes: the room left in this tenant's workspace bound (%s)]",
		limit, sandbox.CodeQuotaExceeded)
}

// quotaNote measures the usage of the workspace's tenant after a command (which may have written
// anything) and, when it is over the tenant bound, says so: the file tools then refuse writes
// that grow it (FS_QUOTA_EXCEEDED) until files are removed. "" without a bound or when under it.
func quotaNote(ws *sandbox.Workspace) string {
	used, over, ok, err := ws.TenantUsageAfresh()
	switch {
	case !ok:
		return ""
	case err != nil:
		return "\n[the workspace quota could not be checked]"
	case !over:
		return ""
	}
	return fmt.Sprintf("\n[workspace quota exceeded (%s): this tenant's workspaces hold %d bytes, more than the %d allowed; "+
		"write and edit are refused until files are removed]", sandbox.CodeQuotaExceeded, used, ws.TenantQuota())
}

// workdir resolves the working directory, which must be a directory inside the workspace.
func workdir(ws *sandbox.Workspace, p string) (string, error) {
	rel, err := ws.Rel(p)
	if err == nil {
		var fi fs.FileInfo
		if fi, err = ws.Root.Stat(rel); err == nil {
			if !fi.IsDir() {
				return "", registry.NewError("FsError", sandbox.CodeNotDirectory, "workdir %s is not a directory", p)
			}
			return rel, nil
		}
	}
	switch code := sandbox.Code(err); code {
	case sandbox.CodeSandboxDenied:
		return "", registry.NewError("FsError", code, "workdir %s: %s", p, sandbox.ErrOutside)
	case sandbox.CodeNotFound:
		return "", registry.NewError("FsError", code, "workdir %s does not exist", p)
	default:
		return "", registry.NewError("FsError", code, "workdir %s cannot be used", p)
	}
}

// render is the model-facing output of a command.
func render(r sandbox.Result, timeout time.Duration) string {
	r.Stdout, r.Stderr = strings.ToValidUTF8(r.Stdout, "\uFFFD"), strings.ToValidUTF8(r.Stderr, "\uFFFD")
	var b strings.Builder
	b.WriteString(r.Stdout)
	if r.StdoutDropped > 0 {
		fmt.Fprintf(&b, "\n[stdout truncated: %d more bytes not shown]", r.StdoutDropped)
	}
	if r.Stderr != "" || r.StderrDropped > 0 {
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteString("\n")
		}
		b.WriteString("[stderr]\n" + r.Stderr)
		if r.StderrDropped > 0 {
			fmt.Fprintf(&b, "\n[stderr truncated: %d more bytes not shown]", r.StderrDropped)
		}
	}
	var notes []string
	if r.TimedOut {
		notes = append(notes, fmt.Sprintf("[timed out after %dms]", timeout.Milliseconds()))
	} else if r.ExitCode != 0 {
		notes = append(notes, fmt.Sprintf("[exit code: %d]", r.ExitCode))
	}
	if r.OOMKilled {
		notes = append(notes, fmt.Sprintf("[killed: out of memory: the command's processes and its /tmp and /dev/shm together reached the sandbox's memory bound of %d bytes]", r.MemoryBytes))
	}
	out := strings.TrimRight(b.String(), "\n")
	if len(notes) > 0 {
		if out != "" {
			out += "\n"
		}
		out += strings.Join(notes, "\n")
	}
	if out == "" {
		return "(no output)"
	}
	return out
}
