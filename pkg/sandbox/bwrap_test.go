package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/sandbox"
	"github.com/dshd/dshd/pkg/sandbox/sandboxtest"
)

// bwrapOrSkip returns the bwrap provider, or skips the test when bubblewrap cannot run on this
// machine (not installed, or user namespaces not allowed). scripts/ensure-deps.sh installs it, so
// `make test` runs these tests.
func bwrapOrSkip(t *testing.T) *sandbox.Bwrap {
	t.Helper()
	return sandboxtest.Bwrap(t)
}

// workspaces returns workspaces in a fresh root that the sandbox user can reach, owned as the
// provider needs.
func workspaces(t *testing.T, owner *sandbox.Owner) *sandbox.Workspaces {
	t.Helper()
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: sandboxtest.WorkspaceRoot(t), Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func ownerOf(b *sandbox.Bwrap) *sandbox.Owner {
	if uid, gid, ok := b.Owner(); ok {
		return &sandbox.Owner{UID: uid, GID: gid}
	}
	return nil
}

func open(t *testing.T, w *sandbox.Workspaces, id string) *sandbox.Workspace {
	t.Helper()
	ws, err := w.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	return ws
}

func runOK(t *testing.T, p sandbox.Provider, spec sandbox.Spec) sandbox.Result {
	t.Helper()
	if spec.Timeout == 0 {
		spec.Timeout = 60 * time.Second
	}
	res, err := p.Run(context.Background(), spec)
	if err != nil {
		t.Fatalf("run %q: %v", spec.Command, err)
	}
	return res
}

func TestBwrapWorkspaceIsTheOnlyWritableHostDirectory(t *testing.T) {
	t.Parallel()
	b := bwrapOrSkip(t)
	w := workspaces(t, ownerOf(b))
	a, other := open(t, w, "a"), open(t, w, "b")
	if err := os.WriteFile(filepath.Join(other.Dir, "secret"), []byte("other-session-secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := runOK(t, b, sandbox.Spec{Workspace: a.Dir, Command: "echo hello > f && cat f && pwd && touch /usr/x"})
	if res.Stdout != "hello\n"+sandbox.WorkspacePath+"\n" || res.ExitCode == 0 {
		t.Fatalf("workspace write: %+v", res)
	}
	for _, cmd := range []string{
		"cat /etc/shadow",
		"cat " + filepath.Join(other.Dir, "secret"),
		"cat /workspace/../b/files/secret",
		"ls " + w.Root(),
		"cat /root/.bashrc",
	} {
		res := runOK(t, b, sandbox.Spec{Workspace: a.Dir, Command: cmd})
		if res.ExitCode == 0 || strings.Contains(res.Stdout+res.Stderr, "other-session-secret") {
			t.Errorf("%q escaped the sandbox: %+v", cmd, res)
		}
	}
}

func TestBwrapEnvironmentIsMinimal(t *testing.T) {
	t.Parallel()
	b := bwrapOrSkip(t)
	ws := open(t, workspaces(t, ownerOf(b)), "env")
	res := runOK(t, b, sandbox.Spec{Workspace: ws.Dir, Command: "env; ulimit -u -t -n", Env: map[string]string{"X_GIVEN": "1"}})
	got := res.Stdout
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.Contains(got, kv) && !shellSets[k] {
			t.Errorf("the server's %s reached the sandbox", k)
		}
	}
	for _, want := range []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/workspace", "X_GIVEN=1",
		"(-u) 256\n", "(seconds, -t) 600\n", "(-n) 1024\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s\n%s", want, got, res.Stderr)
		}
	}
}

// shellSets are the variables bash sets itself, or that the minimal environment has too.
var shellSets = map[string]bool{"LANG": true, "SHLVL": true, "PWD": true, "_": true, "OLDPWD": true}

func TestBwrapHasNoNetwork(t *testing.T) {
	t.Parallel()
	b := bwrapOrSkip(t)
	ws := open(t, workspaces(t, ownerOf(b)), "net")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted sync.WaitGroup
	accepts := 0
	accepted.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepts++
			_ = c.Close()
		}
	})
	port := ln.Addr().(*net.TCPAddr).Port
	cmd := fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && echo CONNECTED", port)
	res := runOK(t, b, sandbox.Spec{Workspace: ws.Dir, Command: cmd})
	if res.ExitCode == 0 || strings.Contains(res.Stdout, "CONNECTED") {
		t.Fatalf("connected without network: %+v", res)
	}
	// With the network (the egress network) the host's loopback stays out of reach too; what it
	// does reach is TestEgressReachesOnlyPublicAddresses's control.
	sandboxtest.Network(t, b)
	res = runOK(t, b, sandbox.Spec{Workspace: ws.Dir, Command: cmd, Network: true})
	if res.ExitCode == 0 || strings.Contains(res.Stdout, "CONNECTED") {
		t.Fatalf("Network: true reached the host's loopback: %+v", res)
	}
	_ = ln.Close()
	accepted.Wait()
	if accepts != 0 {
		t.Fatalf("the listener accepted %d connections from sandboxes", accepts)
	}
}

func TestBwrapForkBombIsContained(t *testing.T) {
	t.Parallel()
	b := bwrapOrSkip(t)
	ws := open(t, workspaces(t, ownerOf(b)), "bomb")
	// The bomb forks until the limit, in a subshell of its own; the shell then counts the
	// sandbox's processes with builtins only (it forks nothing after starting the bomb: a fork
	// of its own that failed would stall it in bash's fork retries, on a loaded machine for
	// longer than the test waits) and exits, which ends the sandbox and every process in it.
	cmd := `( bomb() { bomb | bomb & }; bomb ) &
end=$((SECONDS + 3)); while (( SECONDS < end )); do :; done
n=0; for p in /proc/[0-9]*; do n=$((n + 1)); done; echo "procs=$n"`
	const limit = 32
	start := time.Now()
	res := runOK(t, b, sandbox.Spec{Workspace: ws.Dir, Command: cmd, Timeout: 60 * time.Second,
		Limits: sandbox.Limits{Processes: limit}})
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(res.Stdout, "procs=")))
	if err != nil || n > limit+1 || n < limit/2 {
		t.Fatalf("processes at the end: %q (limit %d); stderr %.300q", res.Stdout, limit, res.Stderr)
	}
	if !strings.Contains(res.Stderr, "Resource temporarily unavailable") {
		t.Errorf("no fork failure reported: %.300q", res.Stderr)
	}
	if res.TimedOut || time.Since(start) > 30*time.Second {
		t.Errorf("the bomb outlived its shell: %+v after %v", res, time.Since(start))
	}
}

func TestBwrapTimeoutAndCancelKillTheProcessTree(t *testing.T) {
	t.Parallel()
	b := bwrapOrSkip(t)
	for _, mode := range []string{"timeout", "cancel"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ws := open(t, workspaces(t, ownerOf(b)), "kill")
			testKillsTree(t, b, ws, mode, true)
		})
	}
}

// testKillsTree starts children (one in the background, one behind nohup and, with setsid, one
// in a session of its own) that carry a marker in their argv, finds their host pids while the
// command runs, and checks that none survives the timeout or the cancel.
func testKillsTree(t *testing.T, p sandbox.Provider, ws *sandbox.Workspace, mode string, setsid bool) {
	marker := fmt.Sprintf("dshd-marker-%d-%s", time.Now().UnixNano(), mode)
	cmd := fmt.Sprintf(`(exec -a %[1]s sleep 1000) & nohup bash -c 'exec -a %[1]s sleep 1000' >/dev/null 2>&1 & `, marker)
	children := 2
	if setsid {
		cmd += fmt.Sprintf(`setsid bash -c 'exec -a %[1]s sleep 1000' & `, marker)
		children++
	}
	cmd += "sleep 1000"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	spec := sandbox.Spec{Workspace: ws.Dir, Command: cmd, Timeout: 60 * time.Second}
	found := make(chan []int, 1)
	go func() {
		pids := waitForMarker(marker, children, 30*time.Second)
		found <- pids
		if mode == "timeout" {
			return
		}
		cancel()
	}()
	if mode == "timeout" {
		spec.Timeout = 2 * time.Second
	}
	start := time.Now()
	res, err := p.Run(ctx, spec)
	pids := <-found
	if len(pids) < children {
		t.Fatalf("the children never started (%v): %+v %v", pids, res, err)
	}
	switch mode {
	case "timeout":
		if err != nil || !res.TimedOut {
			t.Fatalf("want a timed-out result, got %+v, %v", res, err)
		}
	case "cancel":
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("want context.Canceled, got %+v, %v", res, err)
		}
	}
	if d := time.Since(start); d > 40*time.Second {
		t.Errorf("the kill took %v", d)
	}
	for _, pid := range pids {
		if !gone(pid, 10*time.Second) {
			t.Errorf("child %d survived: kill -0 succeeds and it is no zombie", pid)
		}
	}
}

// gone waits until kill -0 fails on pid, or it is a zombie (killed, not yet reaped by whoever
// inherited it).
func gone(pid int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return true
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if _, rest, ok := strings.Cut(string(b), ") "); ok && strings.HasPrefix(rest, "Z") {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitForMarker returns the host pids of processes whose argv[0] is marker, once there are n.
func waitForMarker(marker string, n int, within time.Duration) []int {
	deadline := time.Now().Add(within)
	for {
		var pids []int
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err == nil && strings.HasPrefix(string(b), marker+"\x00") {
				pids = append(pids, pid)
			}
		}
		if len(pids) >= n || time.Now().After(deadline) {
			return pids
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestBwrapOutputIsCapped(t *testing.T) {
	t.Parallel()
	b := bwrapOrSkip(t)
	ws := open(t, workspaces(t, ownerOf(b)), "out")
	const total = 100_000_000
	res := runOK(t, b, sandbox.Spec{Workspace: ws.Dir,
		Command: fmt.Sprintf(`head -c %d /dev/zero | tr '\0' a; echo done >&2`, total)})
	if len(res.Stdout) != sandbox.DefaultOutputBytes || res.StdoutDropped != total-sandbox.DefaultOutputBytes ||
		!res.Truncated || res.Stderr != "done\n" || res.ExitCode != 0 {
		t.Fatalf("kept %d, dropped %d, truncated %v, stderr %q, exit %d",
			len(res.Stdout), res.StdoutDropped, res.Truncated, res.Stderr, res.ExitCode)
	}
}

func TestBwrapExitCodeAndWorkdir(t *testing.T) {
	t.Parallel()
	b := bwrapOrSkip(t)
	ws := open(t, workspaces(t, ownerOf(b)), "exit")
	if err := ws.MkdirAll("sub/dir"); err != nil {
		t.Fatal(err)
	}
	res := runOK(t, b, sandbox.Spec{Workspace: ws.Dir, Dir: "sub/dir", Command: "pwd; echo oops >&2; exit 3"})
	if res.Stdout != "/workspace/sub/dir\n" || res.Stderr != "oops\n" || res.ExitCode != 3 || res.TimedOut {
		t.Fatalf("%+v", res)
	}
}

// TestBwrapNetworkNamespace: a command runs in a network namespace of its own (another
// namespace than the host's): without Spec.Network with only a loopback interface; with it
// (the egress network), with its loopback and pasta's interface, never in the host's namespace.
func TestBwrapNetworkNamespace(t *testing.T) {
	t.Parallel()
	b := bwrapOrSkip(t)
	ws := open(t, workspaces(t, ownerOf(b)), "netns")
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Skipf("SKIP: no /proc/self/ns/net here: %v", err)
	}
	hostIfaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	// The namespace, then the name of every interface.
	const probe = "readlink /proc/self/ns/net; tail -n +3 /proc/net/dev | cut -d: -f1"
	own := runOK(t, b, sandbox.Spec{Workspace: ws.Dir, Command: probe})
	lines := strings.Fields(own.Stdout)
	if len(lines) == 0 || lines[0] == host || strings.Join(lines[1:], ",") != "lo" {
		t.Fatalf("without Network: %q (the host's namespace is %s)", own.Stdout, host)
	}
	ownNS := lines[0]
	sandboxtest.Network(t, b)
	egress := runOK(t, b, sandbox.Spec{Workspace: ws.Dir, Command: probe, Network: true})
	lines = strings.Fields(egress.Stdout)
	if len(lines) != 3 || lines[0] == host || lines[0] == ownNS || !slices.Contains(lines[1:], "lo") {
		t.Fatalf("with Network: %q, want a namespace of its own with lo and one interface (the host's is %s, with %d)",
			egress.Stdout, host, len(hostIfaces))
	}
}
