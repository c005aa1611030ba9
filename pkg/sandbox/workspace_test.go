package sandbox_test

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/dshd/dshd/pkg/sandbox"
)

func TestWorkspaceRel(t *testing.T) {
	t.Parallel()
	ws := open(t, workspaces(t, nil), "rel")
	for in, want := range map[string]string{
		"":                       ".",
		".":                      ".",
		"a/b/../c":               "a/c",
		"/workspace":             ".",
		"/workspace/x/y":         "x/y",
		ws.Dir + "/z":            "z",
		"./a//b/":                "a/b",
		"a/../../workspace/file": "",
		"..":                     "",
		"../rel/files/x":         "",
		"/etc/passwd":            "",
		"/workspacex/a":          "",
		"/workspace/../etc":      "",
		"a\x00b":                 "",
	} {
		got, err := ws.Rel(in)
		if want == "" {
			if !errors.Is(err, sandbox.ErrOutside) || sandbox.Code(err) != sandbox.CodeSandboxDenied {
				t.Errorf("Rel(%q) = %q, %v; want ErrOutside", in, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("Rel(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestWorkspaceRootRefusesSymlinksOut(t *testing.T) {
	t.Parallel()
	w := workspaces(t, nil)
	ws, other := open(t, w, "links"), open(t, w, "other")
	outside := filepath.Join(other.Dir, "secret")
	if err := os.WriteFile(outside, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"abs": outside, "rel": "../../other/files/secret", "dir": "/etc"} {
		if err := os.Symlink(target, filepath.Join(ws.Dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"abs", "rel", "dir/passwd"} {
		_, err := ws.Root.ReadFile(p)
		if !sandbox.IsOutside(err) || sandbox.Code(err) != sandbox.CodeSandboxDenied {
			t.Errorf("read %s: %v, want a sandbox denial", p, err)
		}
	}
}

func TestWorkspacesSurviveRestartCopyAndDelete(t *testing.T) {
	t.Parallel()
	w := workspaces(t, nil)
	ws := open(t, w, "src")
	if err := ws.MkdirAll("d/e"); err != nil {
		t.Fatal(err)
	}
	if err := ws.Root.WriteFile("d/e/f.txt", []byte("content"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("e/f.txt", filepath.Join(ws.Dir, "d", "link")); err != nil {
		t.Fatal(err)
	}
	if err := ws.Observe("d/e/f.txt", "v1"); err != nil {
		t.Fatal(err)
	}
	// A restart: a new Workspaces over the same root sees the files and the observations.
	again, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: w.Root()})
	if err != nil {
		t.Fatal(err)
	}
	re := open(t, again, "src")
	if v, ok, err := re.Observed("d/e/f.txt"); err != nil || !ok || v != "v1" {
		t.Fatalf("observation after restart: %q %v %v", v, ok, err)
	}
	if err := again.Copy("src", "dst"); err != nil {
		t.Fatal(err)
	}
	if err := again.Copy("src", "dst"); err == nil {
		t.Error("a second copy onto dst succeeded")
	}
	if err := again.Copy("missing", "dst2"); err != nil {
		t.Errorf("copy of a session without a workspace: %v", err)
	}
	dst := open(t, again, "dst")
	b, err := dst.Root.ReadFile("d/link")
	fi, _ := dst.Root.Lstat("d/e/f.txt")
	if err != nil || string(b) != "content" || fi == nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("copy: %q %v %v", b, err, fi)
	}
	if v, ok, _ := dst.Observed("d/e/f.txt"); !ok || v != "v1" {
		t.Errorf("the copy has no observation")
	}
	if err := again.Delete("dst"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(w.Root(), "dst")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("deleted workspace still there: %v", err)
	}
	if _, err := w.Open("../x"); !errors.Is(err, sandbox.ErrBadID) {
		t.Errorf("Open(../x): %v", err)
	}
}

func TestWorkspaceQuota(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: root, QuotaBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	ws := open(t, w, "q")
	if err := ws.Root.WriteFile("a", make([]byte, 60), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ws.CheckQuota(40); err != nil {
		t.Errorf("at the quota: %v", err)
	}
	if err := ws.CheckQuota(41); !errors.Is(err, sandbox.ErrQuota) || sandbox.Code(err) != sandbox.CodeTooLarge {
		t.Errorf("over the quota: %v", err)
	}
}

// TestTenantUsageFollowsBindCopyAndDelete: a tenant's usage counts the workspaces bound to it, a
// fork's copy counts for the source's tenant, a deleted workspace no longer counts, and a
// workspace bound to another tenant moves there.
func TestTenantUsageFollowsBindCopyAndDelete(t *testing.T) {
	t.Parallel()
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: t.TempDir(), TenantQuotaBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	usage := func(tenant string, want int64) {
		t.Helper()
		if n, err := w.TenantUsage(tenant); err != nil || n != want {
			t.Fatalf("usage of %s: %d %v, want %d", tenant, n, err, want)
		}
	}
	if err := w.Bind("a", "t1"); err != nil {
		t.Fatal(err)
	}
	if err := w.Bind("a", "t1"); err != nil { // idempotent
		t.Fatal(err)
	}
	ws := open(t, w, "a")
	if ws.Tenant() != "t1" {
		t.Fatalf("tenant %q", ws.Tenant())
	}
	if err := ws.Root.WriteFile("f", make([]byte, 300), 0o644); err != nil {
		t.Fatal(err)
	}
	usage("t1", 300)
	if err := w.Copy("a", "b"); err != nil {
		t.Fatal(err)
	}
	usage("t1", 600)
	if got := open(t, w, "b").Tenant(); got != "t1" {
		t.Fatalf("the copy's tenant: %q", got)
	}
	if err := ws.CheckQuota(401); sandbox.Code(err) != sandbox.CodeQuotaExceeded || !errors.Is(err, sandbox.ErrTenantQuota) {
		t.Fatalf("over the bound: %v", err)
	}
	if err := w.Delete("b"); err != nil {
		t.Fatal(err)
	}
	usage("t1", 300)
	if err := w.Bind("a", "t2"); err != nil {
		t.Fatal(err)
	}
	usage("t1", 0)
	usage("t2", 300)
	if err := w.Bind("a", "../x"); !errors.Is(err, sandbox.ErrBadID) {
		t.Fatalf("a bad tenant id: %v", err)
	}
}

// TestForkCopyIsAdmittedAgainstTheTenantBound (issue 17, finding 3): five forks of a session
// whose tenant was over its bound were all accepted. A fork's copy is admitted before it is
// made, and counted at once: of five concurrent admissions of a 1.5 MiB source under a 4 MiB
// bound exactly one passes (two would make 4.5 MiB), and none of an over-bound source.
func TestForkCopyIsAdmittedAgainstTheTenantBound(t *testing.T) {
	t.Parallel()
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: t.TempDir(), TenantQuotaBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Bind("src", "t1"); err != nil {
		t.Fatal(err)
	}
	src := open(t, w, "src")
	if err := src.Root.WriteFile("big", make([]byte, 3<<19), 0o644); err != nil {
		t.Fatal(err)
	}
	admit := func() (admitted int, dones []func()) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() {
				done, err := w.AdmitCopy("src")
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					admitted++
					dones = append(dones, done)
				case !errors.Is(err, sandbox.ErrTenantQuota):
					t.Errorf("admit: %v", err)
				}
			})
		}
		wg.Wait()
		return admitted, dones
	}
	n, dones := admit()
	if n != 1 {
		t.Fatalf("%d of 5 concurrent forks admitted, want 1", n)
	}
	if err := w.Copy("src", "child"); err != nil {
		t.Fatal(err)
	}
	dones[0]()
	if n, err := w.TenantUsage("t1"); err != nil || n != 3<<20 {
		t.Fatalf("usage after the copy: %d %v", n, err)
	}
	if n, _ := admit(); n != 0 { // 3 MiB + 1.5 MiB
		t.Fatalf("%d forks admitted over the bound", n)
	}
}
