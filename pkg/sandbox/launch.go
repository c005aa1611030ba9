package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// launch is one bubblewrap process being started: its options go through a pipe (--args), so no
// /proc/*/cmdline inside the sandbox shows them (they name the workspace's host path), and it
// reports its child (--info-fd) and waits (--block-fd) until the child has been placed in the
// command's memory cgroup and given its nice value, before anything of the command runs. The
// child's descendants inherit both, so no process of the command ever runs outside them.
//
// Its methods are called by one goroutine: started after cmd.Start, close once it is done.
type launch struct {
	cmd   *exec.Cmd
	nice  int
	group *cgroup // nil without a memory cgroup
	// net is the command's egress network (egress.go), nil without one: set up once the child
	// is in its cgroup, before the command runs.
	net *egressRun
	// argsR, infoW and blockR are the child's ends, closed once it has started; infoR and blockW
	// are ours.
	argsR, infoW, blockR *os.File
	infoR, blockW        *os.File
}

// The fds the options name: exec.Cmd.ExtraFiles start at 3.
const (
	argsFD  = "3"
	infoFD  = "4"
	blockFD = "5"
	// firstExtraFD is the first fd after the launch's own: the egress network's pipe.
	firstExtraFD = 6
)

// launcher prepares bwrap with opts (every option) and argv (the command after "--"), and the
// command's memory cgroup when there is one. The caller calls close when the command is done.
func (b *Bwrap) launcher(opts, argv []string, net *egressRun) (*launch, error) {
	// The options go through the pipe NUL-separated: a NUL inside one (Spec.Env, Dir or
	// Workspace are the caller's) would split it into options of its own.
	for _, o := range opts {
		if strings.IndexByte(o, 0) >= 0 {
			return nil, errors.New("sandbox: an option of the command holds a NUL byte (its environment, directory or workspace path)")
		}
	}
	l := &launch{nice: b.cfg.Nice, net: net}
	var err error
	var argsW *os.File
	if l.argsR, argsW, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("sandbox: pipe: %w", err)
	}
	if l.infoR, l.infoW, err = os.Pipe(); err != nil {
		l.close()
		return nil, fmt.Errorf("sandbox: pipe: %w", err)
	}
	if l.blockR, l.blockW, err = os.Pipe(); err != nil {
		l.close()
		return nil, fmt.Errorf("sandbox: pipe: %w", err)
	}
	if b.cgroups != nil {
		if l.group, err = b.cgroups.create(b.cfg.MemoryBytes); err != nil {
			_ = argsW.Close()
			l.close()
			return nil, err
		}
	}
	opts = append(opts, "--info-fd", infoFD, "--block-fd", blockFD)
	// The pipe may hold less than the options (Spec.Env is the caller's): write them while bwrap
	// reads. A bwrap that dies first makes the write fail, which its exit status then explains.
	go func() {
		_, _ = argsW.WriteString(strings.Join(opts, "\x00") + "\x00")
		_ = argsW.Close()
	}()
	cmd := exec.Command(b.bin, append([]string{"--args", argsFD, "--"}, argv...)...)
	cmd.Env = environ("/", nil) // bwrap itself gets nothing of the server's environment either
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: b.cred}
	cmd.ExtraFiles = []*os.File{l.argsR, l.infoW, l.blockR}
	if net != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, net.files...)
	}
	l.cmd = cmd
	return l, nil
}

// started is called once cmd has started: it reads bwrap's child pid, moves the child into the
// cgroup, sets its nice value and lets it go on. An error means the command must not run: the
// caller kills it (it is still held). ctx ending stops the wait for bwrap's report and the egress
// setup: the error is then ctx's.
func (l *launch) started(ctx context.Context) error {
	for _, f := range []**os.File{&l.argsR, &l.infoW, &l.blockR} {
		_ = (*f).Close()
		*f = nil
	}
	if l.net != nil {
		l.net.closeFiles()
	}
	var info struct {
		ChildPid int `json:"child-pid"`
	}
	stop := context.AfterFunc(ctx, func() { _ = l.infoR.SetReadDeadline(time.Now()) })
	err := json.NewDecoder(l.infoR).Decode(&info)
	stop()
	if ctx.Err() != nil {
		return fmt.Errorf("sandbox: %w", ctx.Err())
	}
	if err != nil || info.ChildPid <= 0 {
		// bwrap ended before it started its child: its exit status and stderr say why.
		return l.release()
	}
	if l.group != nil {
		if err := l.group.add(info.ChildPid); err != nil {
			return err
		}
	}
	if l.nice > 0 {
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, info.ChildPid, l.nice); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("sandbox: nice: %w", err)
		}
	}
	if l.net != nil {
		if err := l.net.attachPid(ctx, info.ChildPid); err != nil {
			return err
		}
	}
	return l.release()
}

// release lets bwrap's child go on (it reads one byte from the block fd).
func (l *launch) release() error {
	_, _ = l.blockW.Write([]byte{1})
	_ = l.blockW.Close()
	l.blockW = nil
	return nil
}

// memory returns whether the kernel killed a process of the command for its memory cgroup, and
// the cgroup's peak usage; false and 0 without a cgroup.
func (l *launch) memory() (oom bool, peak int64) {
	if l.group == nil {
		return false, 0
	}
	return l.group.oomKilled(), l.group.peak()
}

// close releases what is left: the pipes and the cgroup (once the command is gone).
func (l *launch) close() {
	for _, f := range []*os.File{l.argsR, l.infoW, l.blockR, l.infoR, l.blockW} {
		if f != nil {
			_ = f.Close()
		}
	}
	l.argsR, l.infoW, l.blockR, l.infoR, l.blockW = nil, nil, nil, nil, nil
	if l.group != nil {
		l.group.remove()
		l.group = nil
	}
}
