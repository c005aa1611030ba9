package sandbox_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/sandbox"
)

// hostCanary returns a host directory outside every workspace root holding canary (a file
// whose content is a fresh random value) and big (1 MiB), and that value.
func hostCanary(t *testing.T) (dir string, value []byte) {
	t.Helper()
	var rnd [16]byte
	_, _ = rand.Read(rnd[:])
	value = []byte("HOST-CANARY-" + hex.EncodeToString(rnd[:]))
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "canary"), value, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big"), bytes.Repeat(value, (1<<20)/len(value)+1), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, value
}

// forkSource writes the source workspace the race tests copy: x.txt, d/a.txt, d/sub/b.txt.
func forkSource(t *testing.T, w *sandbox.Workspaces, id string) *sandbox.Workspace {
	t.Helper()
	ws := open(t, w, id)
	if err := ws.MkdirAll("d/sub"); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"x.txt": "workspace-x", "d/a.txt": "workspace-a", "d/sub/b.txt": "workspace-b"} {
		if err := ws.Root.WriteFile(name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

// assertNoHostByte fails when a regular file under dir (never following a link) holds canary or
// the server's environment (/proc/self/environ), or a file named want is missing.
func assertNoHostByte(t *testing.T, dir string, canary []byte, want ...string) {
	t.Helper()
	environ, err := os.ReadFile("/proc/self/environ")
	if err != nil || len(environ) < 16 {
		t.Fatalf("the test's environment: %d bytes, %v", len(environ), err)
	}
	seen := map[string]bool{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		seen[filepath.ToSlash(rel)] = true
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, canary) {
			t.Errorf("%s holds a host file's bytes", rel)
		}
		if bytes.Contains(b, environ[:16]) {
			t.Errorf("%s holds the server's environment", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range want {
		if !seen[name] {
			t.Errorf("the copy has no %s", name)
		}
	}
}

// TestForkCopyFollowsNoLink (issue 17, finding 1, critical): a fork copied the source workspace
// in the server process by listing a directory and then opening each entry by path, following
// links; a command of the source that swapped a link over a listed file (or directory) between
// the listing and the open had a host file (/proc/self/environ, /etc/shadow) copied into the
// child. The test pauses the copy between the listing and each open and makes the swap there:
// the child must hold no byte of the host's files, whatever was swapped in, and the copy must
// not hang on a FIFO.
func TestForkCopyFollowsNoLink(t *testing.T) {
	host, canary := hostCanary(t)
	cases := []struct {
		name string
		at   string // the entry whose open the swap precedes
		swap func(t *testing.T, files string)
		want []string // files the child must still have
	}{
		{"file replaced by a link to a host file", "files/x.txt", func(t *testing.T, files string) {
			replace(t, filepath.Join(files, "x.txt"), func(p string) error { return os.Symlink(filepath.Join(host, "canary"), p) })
		}, []string{"d/a.txt", "d/sub/b.txt"}},
		{"file replaced by a link to /proc/self/environ", "files/x.txt", func(t *testing.T, files string) {
			replace(t, filepath.Join(files, "x.txt"), func(p string) error { return os.Symlink("/proc/self/environ", p) })
		}, []string{"d/a.txt"}},
		{"directory replaced by a link to a host directory", "files/d", func(t *testing.T, files string) {
			if err := os.Rename(filepath.Join(files, "d"), filepath.Join(files, "x.moved")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(host, filepath.Join(files, "d")); err != nil {
				t.Fatal(err)
			}
		}, []string{"x.txt"}},
		{"file replaced by a hard link to a host file", "files/x.txt", func(t *testing.T, files string) {
			replace(t, filepath.Join(files, "x.txt"), func(p string) error { return os.Link(filepath.Join(host, "canary"), p) })
		}, []string{"d/a.txt"}},
		{"file replaced by a FIFO", "files/x.txt", func(t *testing.T, files string) {
			replace(t, filepath.Join(files, "x.txt"), func(p string) error { return syscall.Mkfifo(p, 0o644) })
		}, []string{"d/a.txt", "d/sub/b.txt"}},
		{"links created mid-copy", "files/d/a.txt", func(t *testing.T, files string) {
			for _, p := range []string{"d/late", "d/sub/late", "late"} {
				if err := os.Symlink(filepath.Join(host, "canary"), filepath.Join(files, p)); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(host, filepath.Join(files, "d", "sub", "latedir")); err != nil {
				t.Fatal(err)
			}
		}, []string{"x.txt", "d/a.txt", "d/sub/b.txt"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := workspaces(t, nil)
			src := forkSource(t, w, "src")
			swapped := false
			sandbox.SetWalkOpenHook(t, func(rel string) {
				if rel == c.at && !swapped {
					swapped = true
					c.swap(t, src.Dir)
				}
			})
			copyWithin(t, w, "src", "child", src.Dir, 10*time.Second)
			if !swapped {
				t.Fatalf("the copy never opened %s", c.at)
			}
			assertNoHostByte(t, filepath.Join(w.Root(), "child", "files"), canary, c.want...)
		})
	}
}

// replace removes the file p and makes a new one there with mk.
func replace(t *testing.T, p string, mk func(string) error) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := mk(p); err != nil {
		t.Fatal(err)
	}
}

// copyWithin copies workspace src to dst and fails when the copy fails or is not done within
// bound (a generous bound: the copy must not block, on a FIFO for instance). After a timeout it
// opens every FIFO of files for writing, so that a copy blocked on one returns.
func copyWithin(t *testing.T, w *sandbox.Workspaces, src, dst, files string, bound time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- w.Copy(src, dst) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("copy: %v", err)
		}
	case <-time.After(bound):
		_ = filepath.WalkDir(files, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type()&fs.ModeNamedPipe != 0 {
				if f, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil {
					_ = f.Close()
				}
			}
			return nil
		})
		<-done
		t.Fatalf("the copy was still running after %v (blocked on a FIFO?)", bound)
	}
}

// TestTenantUsageCountsNoLink (issue 17, finding 1: every host-side walk of a workspace): the
// tenant's usage was measured by walking its workspaces by path, so a directory swapped for a
// link to a host directory between the listing and the walk into it had the host's files
// counted (and a bigger host tree walked by the server). Swapped at that moment, the link is
// not walked: the usage is the workspace's own bytes.
func TestTenantUsageCountsNoLink(t *testing.T) {
	host, _ := hostCanary(t)
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: sandboxtestRoot(t), TenantQuotaBytes: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Bind("src", "t1"); err != nil {
		t.Fatal(err)
	}
	src := forkSource(t, w, "src")
	own := int64(len("workspace-x") + len("workspace-a") + len("workspace-b"))
	swap := func(rel string) {
		if strings.TrimPrefix(rel, "files/") == "d" {
			if _, err := os.Lstat(filepath.Join(src.Dir, "d.moved")); err == nil {
				return
			}
			if err := os.Rename(filepath.Join(src.Dir, "d"), filepath.Join(src.Dir, "d.moved")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(host, filepath.Join(src.Dir, "d")); err != nil {
				t.Fatal(err)
			}
		}
	}
	sandbox.SetWalkOpenHook(t, swap)
	n, err := w.TenantUsage("t1")
	if err != nil || n > own {
		t.Errorf("tenant usage %d (%v), want at most the workspace's own %d bytes", n, err, own)
	}
	// Usage walks the same way: put d back, swap it again.
	if err := os.Remove(filepath.Join(src.Dir, "d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(src.Dir, "d.moved"), filepath.Join(src.Dir, "d")); err != nil {
		t.Fatal(err)
	}
	if n, err := src.Usage(); err != nil || n > own {
		t.Errorf("workspace usage %d (%v), want at most the workspace's own %d bytes", n, err, own)
	}
}

func sandboxtestRoot(t *testing.T) string { return t.TempDir() }

// TestWorkspaceWalkRefusesTreesTooDeep: a walk holds a descriptor per level, so a tree nested
// deeper than it descends is an error (the fork's copy fails, the workspace's measure fails),
// never a partial copy or a count that leaves the deep files out; the tenant's usage counts the
// tree as over the tenant bound (review finding 1: it failed, and a failed measure switched the
// bash watchdog off).
func TestWorkspaceWalkRefusesTreesTooDeep(t *testing.T) {
	t.Parallel()
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: t.TempDir(), TenantQuotaBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Bind("deep", "t1"); err != nil {
		t.Fatal(err)
	}
	ws := open(t, w, "deep")
	dir, err := os.Open(ws.Dir)
	if err != nil {
		t.Fatal(err)
	}
	fd := int(dir.Fd())
	for range 1100 { // mkdirat/openat level by level: the path is longer than PATH_MAX
		if err := syscall.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := syscall.Openat(fd, "d", syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if fd != int(dir.Fd()) {
			_ = syscall.Close(fd)
		}
		fd = next
	}
	_ = syscall.Close(fd)
	_ = dir.Close()
	if _, err := ws.Usage(); err == nil || !strings.Contains(err.Error(), "nested more than") {
		t.Errorf("usage of a tree too deep: %v", err)
	}
	if n, err := w.TenantUsage("t1"); err != nil || n <= 1<<30 {
		t.Errorf("the tenant's usage of a tree too deep: %d %v, want over the bound", n, err)
	}
	if err := w.Copy("deep", "copy"); err == nil || !strings.Contains(err.Error(), "nested more than") {
		t.Errorf("copy of a tree too deep: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(w.Root(), "copy")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed copy left its workspace: %v", err)
	}
}
