// Package sandbox runs shell commands for the bash tool behind one interface, Provider, and
// manages the per-session workspaces the tools work in (Workspaces).
//
// Two providers exist. Bwrap (the default) runs every command in a fresh bubblewrap sandbox:
// new user, PID, network, IPC, UTS and cgroup namespaces, the host's /usr read-only and a few
// harmless /etc entries, the session's workspace read-write at WorkspacePath, an empty
// environment, resource limits, and the whole process tree killed at the timeout. Local runs
// commands on the host in the workspace directory: for single-user development only, and
// constructed only when the operator asks for it (LocalConfig.Enabled).
//
// What holds is written next to each provider (bwrap.go, local.go). Workspaces also bound the
// bytes a workspace, and all the workspaces of one tenant, may hold (workspace.go, tenant.go).
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// WorkspacePath is where the bwrap provider binds a session's workspace; it is also the
// sandboxed command's working directory root and HOME.
const WorkspacePath = "/workspace"

// Provider runs shell commands. Implementations are safe for concurrent use.
type Provider interface {
	// Name is "bwrap" or "local".
	Name() string
	// Run runs spec.Command with `bash -c` and waits for it and every process it started. It
	// returns an error only when the command could not be started or ctx was cancelled: then
	// every process of the command has been killed and the error wraps ctx's error. A command
	// that ran has a Result, whatever its exit code; at spec.Timeout it is killed with its
	// children and Result.TimedOut is set.
	Run(ctx context.Context, spec Spec) (Result, error)
}

// Spec is one command to run.
type Spec struct {
	Command string
	// Workspace is the host directory of the session's workspace (Workspace.Dir). Required.
	Workspace string
	// Dir is the working directory relative to the workspace, slash-separated; "" or "." is the
	// workspace itself. It must already be checked to stay inside it (Workspace.Rel).
	Dir string
	// Timeout bounds the command; 0 means DefaultTimeout.
	Timeout time.Duration
	// Env is added to the minimal environment (PATH, HOME, LANG, TMPDIR); nothing of the
	// server's environment is ever passed on.
	Env map[string]string
	// Limits override the provider's limits field by field (zero fields keep the provider's).
	Limits Limits
	// Network gives the command the egress network: public addresses only, never the host's own,
	// its gateways or a private range (bwrap: egress.go). Default: none.
	Network bool
}

// Result is what a command did.
type Result struct {
	// Stdout and Stderr are the first OutputBytes of each stream.
	Stdout, Stderr string
	// StdoutDropped and StderrDropped count the bytes beyond them, read and discarded.
	StdoutDropped, StderrDropped int64
	// ExitCode is the command's exit status, 128+n when a signal n ended it.
	ExitCode int
	// TimedOut is set when the command was killed at its timeout.
	TimedOut bool
	// Truncated is set when a stream dropped bytes.
	Truncated bool
	// Duration is how long the command ran.
	Duration time.Duration
	// OOMKilled is set when the kernel killed a process of the command because the command's
	// memory reached its memory cgroup's bound, MemoryBytes (bwrap with a memory cgroup; 0
	// without one). MemoryPeakBytes is the most the cgroup held at once: the processes' memory
	// and the pages of their /tmp and /dev/shm.
	OOMKilled                    bool
	MemoryBytes, MemoryPeakBytes int64
}

// Limits are the resource limits of one command, applied with `ulimit` (setrlimit) in the shell
// line before the command runs. A zero field means no limit is set for it.
type Limits struct {
	// CPUSeconds is RLIMIT_CPU: CPU time of each process.
	CPUSeconds int
	// MemoryBytes is RLIMIT_AS: the address space of each process (not its resident size).
	MemoryBytes int64
	// Processes is RLIMIT_NPROC: processes of the sandbox's user. bwrap counts it inside the
	// sandbox's own user namespace, so it bounds one command's process tree; the local provider
	// does not set it (it would count every process of the server's user).
	Processes int
	// FileBytes is RLIMIT_FSIZE: the largest file a process may write.
	FileBytes int64
	// OpenFiles is RLIMIT_NOFILE.
	OpenFiles int
}

// Defaults.
const (
	// DefaultTimeout bounds a command whose Spec has none.
	DefaultTimeout = 120 * time.Second
	// DefaultOutputBytes is how much of each stream a Result keeps.
	DefaultOutputBytes = 64 << 10
)

// DefaultLimits are the limits of a provider configured with none.
var DefaultLimits = Limits{CPUSeconds: 600, MemoryBytes: 4 << 30, Processes: 256, FileBytes: 1 << 30, OpenFiles: 1024}

// or returns l with its zero fields taken from d.
func (l Limits) or(d Limits) Limits {
	if l.CPUSeconds == 0 {
		l.CPUSeconds = d.CPUSeconds
	}
	if l.MemoryBytes == 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.Processes == 0 {
		l.Processes = d.Processes
	}
	if l.FileBytes == 0 {
		l.FileBytes = d.FileBytes
	}
	if l.OpenFiles == 0 {
		l.OpenFiles = d.OpenFiles
	}
	return l
}

// ulimit returns the shell line that sets l (bash's ulimit counts -v and -f in KiB); without
// procs, RLIMIT_NPROC is left alone. A limit that cannot be set makes the command fail with 125.
func (l Limits) ulimit(procs bool) string {
	var opts []string
	add := func(flag string, v int64) {
		if v > 0 {
			opts = append(opts, fmt.Sprintf("-%s %d", flag, v))
		}
	}
	add("t", int64(l.CPUSeconds))
	add("v", l.MemoryBytes/1024)
	if procs {
		add("u", int64(l.Processes))
	}
	add("f", l.FileBytes/1024)
	add("n", int64(l.OpenFiles))
	if len(opts) == 0 {
		return ""
	}
	return "ulimit " + strings.Join(opts, " ") + " || exit 125; "
}

// shellArgs are the arguments after the bash binary: the limits, then a fresh `bash -c` of the
// command, passed as a positional parameter so that it is never re-quoted.
func shellArgs(bash string, l Limits, procs bool, command string) []string {
	script := l.ulimit(procs) + "exec " + bash + ` --noprofile --norc -c "$1"`
	return []string{"--noprofile", "--norc", "-c", script, "dshd-sandbox", command}
}

// environ is the minimal environment of a command: PATH, HOME, LANG and TMPDIR, then extra.
func environ(home string, extra map[string]string) []string {
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "LANG=C.UTF-8", "TMPDIR=/tmp"}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// run starts cmd in its own process group and waits for it, with the timeout. When the command
// exits, times out or ctx ends, kill(pid) kills what is left of it (the providers say how far
// that reaches); the output streams are then read to their end, or cut after a short grace when
// a process that escaped the kill still holds them.
//
// hold, when not nil, is told once the command has started: it holds the command until it
// returns (or ctx ends), and an error from it kills the command before anything of it runs.
func run(ctx context.Context, cmd *exec.Cmd, timeout time.Duration, outBytes int, kill func(pid int), hold holder) (Result, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	stdout, stderr := &capWriter{max: outBytes}, &capWriter{max: outBytes}
	readers, err := pipeTo(cmd, stdout, stderr)
	if err != nil {
		return Result{}, err
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	start := time.Now()
	err = cmd.Start()
	readers.closeWriters()
	if err != nil {
		readers.closeReaders()
		return Result{}, fmt.Errorf("sandbox: start: %w", err)
	}
	if hold != nil {
		if err := hold.started(ctx); err != nil {
			kill(cmd.Process.Pid)
			_ = cmd.Wait()
			readers.finish()
			return Result{}, err
		}
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var timedOut bool
	select {
	case err = <-waited:
	case <-timer.C:
		timedOut = true
		kill(cmd.Process.Pid)
		err = <-waited
	case <-ctx.Done():
		kill(cmd.Process.Pid)
		<-waited
		readers.finish()
		return resultOf(stdout, stderr, -1, false, time.Since(start)), fmt.Errorf("sandbox: %w", ctx.Err())
	}
	kill(cmd.Process.Pid) // the command's children that outlived it
	readers.finish()
	return resultOf(stdout, stderr, exitCode(cmd, err), timedOut, time.Since(start)), nil
}

// holder holds a started command until it may run (launch).
type holder interface {
	started(ctx context.Context) error
}

// pipes are a command's output pipes and the goroutines draining them.
type pipes struct {
	r, w []*os.File
	done chan struct{}
	n    int
}

// pipeTo gives cmd an output pipe per writer and drains each into its writer.
func pipeTo(cmd *exec.Cmd, outs ...io.Writer) (*pipes, error) {
	p := &pipes{done: make(chan struct{}, len(outs))}
	for _, out := range outs {
		r, w, err := os.Pipe()
		if err != nil {
			p.closeWriters()
			p.closeReaders()
			return nil, fmt.Errorf("sandbox: pipe: %w", err)
		}
		p.r, p.w = append(p.r, r), append(p.w, w)
		go func() {
			_, _ = io.Copy(out, r)
			p.done <- struct{}{}
		}()
		p.n++
	}
	cmd.Stdout, cmd.Stderr = p.w[0], p.w[1]
	return p, nil
}

func (p *pipes) closeWriters() {
	for _, w := range p.w {
		_ = w.Close()
	}
}

func (p *pipes) closeReaders() {
	for _, r := range p.r {
		_ = r.Close()
	}
}

// finish waits for the drains to reach the end of their streams, for at most drainGrace, then
// closes the read ends.
func (p *pipes) finish() {
	grace := time.NewTimer(drainGrace)
	defer grace.Stop()
	for i := 0; i < p.n; i++ {
		select {
		case <-p.done:
		case <-grace.C:
			p.closeReaders()
			for ; i < p.n; i++ {
				<-p.done
			}
			return
		}
	}
	p.closeReaders()
}

// drainGrace is how long output is still read after the command is gone.
const drainGrace = 2 * time.Second

func exitCode(cmd *exec.Cmd, err error) int {
	if cmd.ProcessState == nil {
		return -1
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) && cmd.ProcessState.ExitCode() == 0 {
		return -1 // an I/O error after a clean exit: report it as a failure
	}
	return cmd.ProcessState.ExitCode()
}

func resultOf(stdout, stderr *capWriter, code int, timedOut bool, d time.Duration) Result {
	return Result{Stdout: string(stdout.buf), Stderr: string(stderr.buf),
		StdoutDropped: stdout.dropped, StderrDropped: stderr.dropped, ExitCode: code, TimedOut: timedOut,
		Truncated: stdout.dropped > 0 || stderr.dropped > 0, Duration: d}
}

// capWriter keeps the first max bytes written to it and counts the rest. exec.Cmd's copying
// goroutine is its only writer; it is read after Wait.
type capWriter struct {
	max     int
	buf     []byte
	dropped int64
}

func (w *capWriter) Write(p []byte) (int, error) {
	if room := w.max - len(w.buf); room > 0 {
		n := min(room, len(p))
		w.buf = append(w.buf, p[:n]...)
		w.dropped += int64(len(p) - n)
	} else {
		w.dropped += int64(len(p))
	}
	return len(p), nil
}
