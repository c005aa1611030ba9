package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// binaries are cmd/server and cmd/mockllm, built once per test process (plain builds, without
// -race, so that they start and run at production speed).
var binaries struct {
	once            sync.Once
	server, mockllm string
	err             error
}

// binDirPrefix names the directories the binaries are built into: the prefix, then the test
// process's pid. pgtest.Main ends the process with os.Exit, so a directory cannot be removed at
// exit; instead each run removes the directories of test processes that are gone.
const binDirPrefix = "dshd-e2e-bin-"

// buildBinaries returns the paths of the server and mockllm binaries, building them on first use.
// It skips the test under -short (every test here runs these processes) and when the go command
// is not on PATH.
func buildBinaries(t *testing.T) (server, mockllm string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: end-to-end tests build and run the server and mockllm processes")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH: cannot build the server")
	}
	binaries.once.Do(func() {
		removeStaleBinDirs()
		dir := filepath.Join(os.TempDir(), binDirPrefix+strconv.Itoa(os.Getpid()))
		if binaries.err = os.MkdirAll(dir, 0o755); binaries.err != nil {
			return
		}
		start := time.Now()
		cmd := exec.Command(gobin, "build", "-o", dir+string(filepath.Separator),
			"github.com/dshd/dshd/cmd/server", "github.com/dshd/dshd/cmd/mockllm")
		if out, err := cmd.CombinedOutput(); err != nil {
			binaries.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		binaries.server, binaries.mockllm = filepath.Join(dir, "server"), filepath.Join(dir, "mockllm")
		t.Logf("built the server and mockllm in %v", time.Since(start).Round(time.Millisecond))
	})
	if binaries.err != nil {
		t.Fatal(binaries.err)
	}
	return binaries.server, binaries.mockllm
}

// removeStaleBinDirs removes the binary directories of test processes that no longer run.
func removeStaleBinDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), binDirPrefix+"*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), binDirPrefix))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}

// proc is a child process whose output goes to a log file under the test's temporary directory.
// The log is printed when the test fails.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{} // closed when the process has exited; waitErr is set then
	waitErr error
}

// startProc starts bin with args and env (added to this process's environment) and stops it
// when the test ends: SIGTERM, then SIGKILL after 15 s.
func startProc(t *testing.T, name, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, logPath: filepath.Join(t.TempDir(), name+".log"), exited: make(chan struct{})}
	logf, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = childAttr()
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			p.dumpLog(t)
		}
	})
	return p
}

// running reports whether the process has not exited yet.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop ends the process gracefully (SIGTERM), or with SIGKILL when it does not exit within 15 s.
func (p *proc) stop() {
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// kill9 kills the process with SIGKILL, as a crash would, and waits until it is gone.
func (p *proc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %s: %v", p.name, err)
	}
	<-p.exited
}

// output returns what the process has written so far.
func (p *proc) output() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// dumpLog logs the last 32 KiB of the process's output.
func (p *proc) dumpLog(t *testing.T) {
	out := p.output()
	if len(out) > 32<<10 {
		out = "...\n" + out[len(out)-32<<10:]
	}
	state := "running"
	if !p.running() {
		state = fmt.Sprintf("exited: %v", p.waitErr)
	}
	t.Logf("--- %s (%s), log %s:\n%s", p.name, state, p.logPath, out)
}
