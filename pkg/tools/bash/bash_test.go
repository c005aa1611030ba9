package bash_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/sandbox"
	"github.com/dshd/dshd/pkg/sandbox/sandboxtest"
	"github.com/dshd/dshd/pkg/tools/bash"
	"github.com/dshd/dshd/pkg/tools/tooltest"
)

type env struct {
	t    *testing.T
	w    *sandbox.Workspaces
	tool *registry.Tool
	reg  *tooltest.Registry
}

func newEnv(t *testing.T, shell sandbox.Provider, owner *sandbox.Owner) *env {
	t.Helper()
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: sandboxtest.WorkspaceRoot(t), Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	tl, err := bash.Tool(bash.Config{Shell: shell, Workspaces: w})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, w: w, tool: tl, reg: tooltest.New(t, tl)}
}

func localEnv(t *testing.T) *env {
	t.Helper()
	l, err := sandbox.NewLocal(sandbox.LocalConfig{Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	return newEnv(t, l, nil)
}

func bwrapEnv(t *testing.T) *env {
	t.Helper()
	b := sandboxtest.Bwrap(t)
	var owner *sandbox.Owner
	if uid, gid, ok := b.Owner(); ok {
		owner = &sandbox.Owner{UID: uid, GID: gid}
	}
	return newEnv(t, b, owner)
}

func (e *env) call(ctx context.Context, session string, args map[string]any) (string, string) {
	e.t.Helper()
	if _, ok := args["description"]; !ok {
		args["description"] = "test"
	}
	res := e.reg.Call(ctx, e.t, session, "bash", args)
	return tooltest.Text(res), tooltest.Code(res)
}

func TestBashOutput(t *testing.T) {
	t.Parallel()
	e := localEnv(t)
	for cmd, want := range map[string]string{
		"echo out":                             "out",
		"echo out; echo err >&2":               "out\n[stderr]\nerr",
		"echo err >&2; exit 3":                 "[stderr]\nerr\n[exit code: 3]",
		"printf 'no newline'; exit 1":          "no newline\n[exit code: 1]",
		"true":                                 "(no output)",
		"kill -9 $$":                           "[exit code: 137]",
		"sleep 5":                              "", // with timeoutMs below
		"head -c 70000 /dev/zero | tr '\\0' a": "",
	} {
		args := map[string]any{"command": cmd}
		if cmd == "sleep 5" {
			args["timeoutMs"] = 200
			want = "[timed out after 200ms]"
		}
		got, code := e.call(context.Background(), "s", args)
		if strings.HasPrefix(cmd, "head") {
			if !strings.HasSuffix(got, "\n[stdout truncated: 4464 more bytes not shown]") || code != "" {
				t.Errorf("%q: %.80q… %s", cmd, got[len(got)-60:], code)
			}
			continue
		}
		if got != want || code != "" {
			t.Errorf("%q = %q %s, want %q", cmd, got, code, want)
		}
	}
}

func TestBashArguments(t *testing.T) {
	t.Parallel()
	e := localEnv(t)
	for _, args := range []map[string]any{
		{"command": "  ", "description": "d"},
		{"command": "true", "description": " "},
		{"command": "true", "description": "d", "timeoutMs": 0},
		{"command": "true", "description": "d", "timeoutMs": -5},
		{"description": "d"},
	} {
		if got, code := e.call(context.Background(), "s", args); code != "INVALID_ARGS" {
			t.Errorf("%v: %q %s", args, got, code)
		}
	}
}

func TestBashWorkdir(t *testing.T) {
	t.Parallel()
	e := localEnv(t)
	ws, err := e.w.Open("s")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := ws.MkdirAll("sub/dir"); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(ws.Dir, "file"), nil, 0o644)
	_ = os.Symlink("/etc", filepath.Join(ws.Dir, "etc"))
	if got, _ := e.call(context.Background(), "s", map[string]any{"command": "pwd", "workdir": "sub/dir"}); got != filepath.Join(ws.Dir, "sub/dir") {
		t.Errorf("workdir: %q", got)
	}
	for wd, want := range map[string]string{"..": sandbox.CodeSandboxDenied, "/tmp": sandbox.CodeSandboxDenied,
		"etc": sandbox.CodeSandboxDenied, "nope": sandbox.CodeNotFound, "file": sandbox.CodeNotDirectory} {
		if got, code := e.call(context.Background(), "s", map[string]any{"command": "pwd", "workdir": wd}); code != want {
			t.Errorf("workdir %q: %q %s, want %s", wd, got, code, want)
		}
	}
}

func TestBashCancelIsAborted(t *testing.T) {
	t.Parallel()
	e := localEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(200 * time.Millisecond); cancel() }()
	start := time.Now()
	got, code := e.call(ctx, "s", map[string]any{"command": "sleep 100"})
	if code != "ABORTED" || got != "Error: tool call aborted" || time.Since(start) > 20*time.Second {
		t.Fatalf("%q %s after %v", got, code, time.Since(start))
	}
}

func TestBashDescriptionStatesTheMode(t *testing.T) {
	t.Parallel()
	if d := localEnv(t).tool.Description; !strings.Contains(d, "local mode") || !strings.Contains(d, "no isolation") {
		t.Errorf("local: %q", d)
	}
	if d := bwrapEnv(t).tool.Description; !strings.Contains(d, "bubblewrap sandbox (mode: bwrap)") || !strings.Contains(d, "no network") {
		t.Errorf("bwrap: %q", d)
	}
}

// TestBashIsSandboxed: in the bwrap mode, bash sees only its own workspace: not /etc/shadow, not
// another session's files, not the network.
func TestBashIsSandboxed(t *testing.T) {
	t.Parallel()
	e := bwrapEnv(t)
	other, err := e.w.Open("other")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := os.WriteFile(filepath.Join(other.Dir, "secret"), []byte("other-secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, code := e.call(context.Background(), "s", map[string]any{"command": "echo mine > f; cat f; pwd"}); got != "mine\n/workspace" || code != "" {
		t.Fatalf("own workspace: %q %s", got, code)
	}
	for _, cmd := range []string{"cat /etc/shadow", "cat " + filepath.Join(other.Dir, "secret"), "cat ../other/files/secret",
		"exec 3<>/dev/tcp/1.1.1.1/80"} {
		got, _ := e.call(context.Background(), "s", map[string]any{"command": cmd})
		if !strings.Contains(got, "[exit code: ") || strings.Contains(got, "other-secret") {
			t.Errorf("%q: %q", cmd, got)
		}
	}
}

// TestBashNetworkFollowsTheSetting: the default bash has no network (no interface but its
// loopback; a connection to a listener on the host's loopback fails) and says so; the definition
// with Config.Network (a preset's tools.bash.network) has the egress network: an interface, but
// the host's loopback stays unreachable (it shared the host's network before issue 17), and its
// description says the network is on, for public addresses only.
func TestBashNetworkFollowsTheSetting(t *testing.T) {
	t.Parallel()
	off := bwrapEnv(t)
	b := sandboxtest.Bwrap(t)
	tl, err := bash.Tool(bash.Config{Shell: b, Workspaces: off.w, Network: true})
	if err != nil {
		t.Fatal(err)
	}
	on := &env{t: t, w: off.w, tool: tl, reg: tooltest.New(t, tl)}
	if d := off.tool.Description; !strings.Contains(d, "there is no network") || strings.Contains(d, "network is on") {
		t.Errorf("off: %q", d)
	}
	if d := on.tool.Description; !strings.Contains(d, "the network is on") || strings.Contains(d, "no network") {
		t.Errorf("on: %q", d)
	}
	if d := on.tool.Description; !strings.Contains(d, "public internet addresses only") {
		t.Errorf("on: %q", d)
	}
	cmd, greeting := sandboxtest.Greeter(t)
	probe, marker := sandboxtest.NetworkProbe()
	if got, _ := off.call(context.Background(), "s", map[string]any{"command": cmd}); strings.Contains(got, greeting) ||
		!strings.Contains(got, "[exit code: ") {
		t.Fatalf("connected without the network: %q", got)
	}
	if got, _ := off.call(context.Background(), "s", map[string]any{"command": probe}); strings.Contains(got, marker) {
		t.Fatalf("an interface without the network: %q", got)
	}
	sandboxtest.Network(t, b)
	if got, _ := on.call(context.Background(), "s", map[string]any{"command": cmd}); strings.Contains(got, greeting) ||
		!strings.Contains(got, "[exit code: ") {
		t.Fatalf("the host's loopback reached with the network: %q", got)
	}
	if got, code := on.call(context.Background(), "s", map[string]any{"command": probe}); got != marker || code != "" {
		t.Fatalf("no interface with the network: %q %s", got, code)
	}
}

// TestBashReportsTheTenantQuota: a command that leaves the session's tenant over its workspace
// bound says so in its result, and the tenant's next write is then refused; once files are
// removed the note goes away.
func TestBashReportsTheTenantQuota(t *testing.T) {
	t.Parallel()
	l, err := sandbox.NewLocal(sandbox.LocalConfig{Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: sandboxtest.WorkspaceRoot(t), TenantQuotaBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	tl, err := bash.Tool(bash.Config{Shell: l, Workspaces: w})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, w: w, tool: tl, reg: tooltest.New(t, tl)}
	for _, s := range []string{"s1", "s2"} {
		if err := w.Bind(s, "tenantA"); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := e.call(context.Background(), "s1", map[string]any{"command": "head -c 600 /dev/zero > a; echo ok"}); got != "ok" {
		t.Fatalf("under the bound: %q", got)
	}
	// The command ends before the watchdog sees it over the bound, or after (then it stops it):
	// either way the result names the code and the usage.
	got, code := e.call(context.Background(), "s2", map[string]any{"command": "head -c 600 /dev/zero > b; echo ok"})
	if code != "" || !strings.HasPrefix(got, "ok\n[workspace quota exceeded (FS_QUOTA_EXCEEDED): this tenant's workspaces hold 1200 bytes, more than the 1000 allowed") &&
		!strings.Contains(got, "[stopped: the command took this tenant's workspaces over their bound (FS_QUOTA_EXCEEDED): they hold 1200 bytes, more than the 1000 allowed") {
		t.Fatalf("over the bound: %q %s", got, code)
	}
	ws, err := w.Open("s1")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := ws.CheckQuota(1); sandbox.Code(err) != sandbox.CodeQuotaExceeded {
		t.Fatalf("a write after the command: %v", err)
	}
	if got, _ := e.call(context.Background(), "s2", map[string]any{"command": "rm b; echo ok"}); got != "ok" {
		t.Fatalf("after removing: %q", got)
	}
	if err := ws.CheckQuota(1); err != nil {
		t.Fatalf("a write after files were removed: %v", err)
	}
}

// quotaBwrapEnv is a bwrap env whose workspaces have the tenant bound, with session s bound to
// tenant tenantW.
func quotaBwrapEnv(t *testing.T, bound int64) *env {
	t.Helper()
	b := sandboxtest.Bwrap(t)
	var owner *sandbox.Owner
	if uid, gid, ok := b.Owner(); ok {
		owner = &sandbox.Owner{UID: uid, GID: gid}
	}
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: sandboxtest.WorkspaceRoot(t), Owner: owner, TenantQuotaBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	tl, err := bash.Tool(bash.Config{Shell: b, Workspaces: w})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Bind("s", "tenantW"); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, w: w, tool: tl, reg: tooltest.New(t, tl)}
}

// assertStoppedSoon checks the watchdog's property on a command of paced writers that printed the
// time ($EPOCHREALTIME) after each MiB file it completed: the command was stopped with the note,
// before it finished, and either the tenant holds at most 64 MiB over the bound, or the command
// ended (the call returned, at ended) within 2 s of the write that took the tenant over it. The
// writers are paced (a MiB per 10 ms each), so that on a loaded machine a late watchdog shows as
// time, and on an idle one as bytes; neither may grow without bound.
func assertStoppedSoon(t *testing.T, e *env, got, code string, ended time.Time, bound int64) {
	t.Helper()
	used, err := e.w.TenantUsage("tenantW")
	if err != nil {
		t.Fatal(err)
	}
	if code != "" || strings.Contains(got, "finished") ||
		!strings.Contains(got, "[stopped: the command took this tenant's workspaces over their bound (FS_QUOTA_EXCEEDED)") {
		t.Fatalf("a command over the bound: %q %s", got, code)
	}
	var writes []float64
	for _, line := range strings.Split(got, "\n") {
		if v, err := strconv.ParseFloat(strings.TrimSpace(line), 64); err == nil {
			writes = append(writes, v)
		}
	}
	slices.Sort(writes)
	if len(writes) == 0 || used <= bound {
		t.Fatalf("the writers completed %d files and the tenant holds %d bytes, want over the bound %d: stopped before it", len(writes), used, bound)
	}
	// The write of the MiB file that took the tenant over the bound; when the command was stopped
	// before that writer printed it, the last time printed (earlier: a stricter bound).
	crossed := time.Unix(0, int64(writes[min(int(bound>>20), len(writes)-1)]*1e9))
	late := ended.Sub(crossed)
	t.Logf("the tenant holds %d bytes: %d MiB over the bound of %d MiB; the command ended %v after the crossing write (%d files written)",
		used, (used-bound)>>20, bound>>20, late, len(writes))
	if used > bound+64<<20 && late > 2*time.Second {
		t.Fatalf("the tenant holds %d bytes, more than 64 MiB over the bound %d, and the command ended %v after it crossed it, more than 2 s", used, bound, late)
	}
}

// TestBashWatchdogStopsACommandOverTheTenantBound (issue 17, finding 3: with the tenant bound at
// 50 MiB one command wrote 200 MB unchecked; review: the test ran in parallel on 2 cores and a
// late look exceeded its 64 MiB slack): with a bound of 16 MiB, a paced writer of up to 400 MiB
// in MiB files is stopped soon after it passes the bound (assertStoppedSoon), and the result says
// why. Not parallel: it is about the watchdog's pace.
func TestBashWatchdogStopsACommandOverTheTenantBound(t *testing.T) {
	const bound = 16 << 20
	e := quotaBwrapEnv(t, bound)
	got, code := e.call(context.Background(), "s", map[string]any{
		"command": `for i in $(seq 1 400); do dd if=/dev/zero of=f$i bs=1M count=1 status=none && echo "$EPOCHREALTIME"; sleep 0.01; done; echo finished`})
	assertStoppedSoon(t, e, got, code, time.Now(), bound)
}

// TestBashWatchdogStopsParallelWriters (review, weak tests: no parallel writers were tested):
// eight paced writers of one command, together up to 400 MiB, are stopped soon after they pass
// the bound of 16 MiB (assertStoppedSoon).
func TestBashWatchdogStopsParallelWriters(t *testing.T) {
	const bound = 16 << 20
	e := quotaBwrapEnv(t, bound)
	got, code := e.call(context.Background(), "s", map[string]any{
		"command": `for w in 1 2 3 4 5 6 7 8; do (for i in $(seq 1 50); do dd if=/dev/zero of=w$w-$i bs=1M count=1 status=none && echo "$EPOCHREALTIME"; sleep 0.01; done) & done; wait; echo finished`})
	assertStoppedSoon(t, e, got, code, time.Now(), bound)
}

// TestBashWatchdogStaysOnOverATreeTooDeep (review finding 1: a tree nested deeper than the walk
// descends made the tenant's measure fail, which switched off the watchdog and the per-file
// limit): once directories are nested 1100 levels deep (mkdir -p of a long path), the tenant counts as over its
// bound, so the next command's files are cut at 1 KiB instead of taking 64 MiB.
func TestBashWatchdogStaysOnOverATreeTooDeep(t *testing.T) {
	t.Parallel()
	const bound = 16 << 20
	e := quotaBwrapEnv(t, bound)
	ws, err := e.w.Open("s")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	nest(t, ws.Dir, 1100)
	got, code := e.call(context.Background(), "s", map[string]any{"command": "dd if=/dev/zero of=big bs=1M count=64 status=none; echo done"})
	st, err := os.Stat(filepath.Join(ws.Dir, "big"))
	if err != nil {
		t.Fatalf("%v (the command said %q %s)", err, got, code)
	}
	if st.Size() > 1024 {
		t.Fatalf("a command of a tenant with a tree too deep wrote a file of %d bytes, want at most 1 KiB: %q %s", st.Size(), got, code)
	}
}

// TestBashSaysAMemoryKill (issue 17, finding 2): a command the kernel killed at its memory
// cgroup's bound is reported as such, with the bound, not only as exit code 137. Skipped where
// the host gives the server no writable memory cgroup.
func TestBashSaysAMemoryKill(t *testing.T) {
	t.Parallel()
	const bound = 128 << 20
	b := sandboxtest.BwrapWith(t, sandbox.BwrapConfig{MemoryBytes: bound})
	if b.MemoryBound() == 0 {
		t.Skip("SKIP: no writable memory cgroup on this host")
	}
	var owner *sandbox.Owner
	if uid, gid, ok := b.Owner(); ok {
		owner = &sandbox.Owner{UID: uid, GID: gid}
	}
	e := newEnv(t, b, owner)
	got, code := e.call(context.Background(), "s", map[string]any{"command": `perl -e '$x = "a" x (512 << 20)'`})
	if code != "" || !strings.Contains(got, "[exit code: 137]\n[killed: out of memory: ") || !strings.Contains(got, "memory bound of 134217728 bytes]") {
		t.Fatalf("a command over its memory bound: %q %s", got, code)
	}
}

// nest makes directories d/d/... levels deep under dir, level by level (mkdirat, openat: the path
// is longer than PATH_MAX).
func nest(t *testing.T, dir string, levels int) {
	t.Helper()
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range levels {
		if err := syscall.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := syscall.Openat(fd, "d", syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		_ = syscall.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	_ = syscall.Close(fd)
}
