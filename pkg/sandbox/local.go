package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
)

// ErrLocalDisabled is returned by NewLocal unless the operator enabled the local provider.
var ErrLocalDisabled = errors.New("sandbox: the local shell provider runs commands on the host without isolation; " +
	"it is for single-user development and must be enabled explicitly (DSHD_SHELL=local)")

// LocalConfig configures the local provider.
type LocalConfig struct {
	// Enabled must be set: the operator asked for commands on the host (DSHD_SHELL=local).
	Enabled bool
	// Limits are every command's limits; zero fields take DefaultLimits. Processes is not
	// applied (RLIMIT_NPROC would count every process of the server's user).
	Limits Limits
	// OutputBytes is how much of each output stream a Result keeps. Default DefaultOutputBytes.
	OutputBytes int
}

// Local runs commands on the host, as the server's user, in the workspace directory. What holds:
// the environment is the minimal one (never the server's), CPU time, address space, file size and
// open files are limited per process, output is capped, and the command's process group is killed
// at the timeout, on cancel and when the command exits. What does not: no filesystem, network or
// process isolation (a command reads and writes whatever the server's user can, including other
// workspaces), no process-count limit, and a process that leaves the group (setsid) survives.
type Local struct {
	cfg  LocalConfig
	bash string
}

// NewLocal returns the local provider, or ErrLocalDisabled when cfg.Enabled is not set.
func NewLocal(cfg LocalConfig) (*Local, error) {
	if !cfg.Enabled {
		return nil, ErrLocalDisabled
	}
	cfg.Limits = cfg.Limits.or(DefaultLimits)
	if cfg.OutputBytes <= 0 {
		cfg.OutputBytes = DefaultOutputBytes
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		return nil, fmt.Errorf("sandbox: bash not found: %w", err)
	}
	return &Local{cfg: cfg, bash: bash}, nil
}

// Name implements Provider.
func (l *Local) Name() string { return "local" }

// Run implements Provider.
func (l *Local) Run(ctx context.Context, spec Spec) (Result, error) {
	if spec.Workspace == "" {
		return Result{}, errors.New("sandbox: spec has no workspace")
	}
	cmd := exec.Command(l.bash, shellArgs(l.bash, spec.Limits.or(l.cfg.Limits), false, spec.Command)...)
	cmd.Dir = filepath.Join(spec.Workspace, filepath.FromSlash(filepath.Clean("/"+spec.Dir)))
	cmd.Env = environ(spec.Workspace, spec.Env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return run(ctx, cmd, spec.Timeout, l.cfg.OutputBytes, killGroup, nil)
}
