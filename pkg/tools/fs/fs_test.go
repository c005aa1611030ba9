package fs_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/sandbox"
	"github.com/dshd/dshd/pkg/tools/fs"
	"github.com/dshd/dshd/pkg/tools/tooltest"
)

type env struct {
	t   *testing.T
	w   *sandbox.Workspaces
	reg *tooltest.Registry
}

func newEnv(t *testing.T, quota int64) *env {
	t.Helper()
	return newEnvAt(t, t.TempDir(), quota)
}

// newEnvAt is a replica of the file tools over the workspace root root.
func newEnvAt(t *testing.T, root string, quota int64) *env {
	t.Helper()
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: root, QuotaBytes: quota})
	if err != nil {
		t.Fatal(err)
	}
	tools, err := fs.Tools(fs.Config{Workspaces: w})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, w: w, reg: tooltest.New(t, tools...)}
}

// call runs a tool as session s and returns its text and error code.
func (e *env) call(s, name string, args map[string]any) (string, string) {
	e.t.Helper()
	res := e.reg.Call(context.Background(), e.t, s, name, args)
	return tooltest.Text(res), tooltest.Code(res)
}

// dir is the host directory of session s's files.
func (e *env) dir(s string) string {
	ws, err := e.w.Open(s)
	if err != nil {
		e.t.Fatal(err)
	}
	defer ws.Close()
	return ws.Dir
}

func TestReadIsLineNumberedWithOffsetAndLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0)
	if err := os.WriteFile(filepath.Join(e.dir("s"), "f.txt"), []byte("one\ntwo\nthree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	text, code := e.call("s", "read", map[string]any{"file_path": "f.txt"})
	if code != "" || text != "     1\tone\n     2\ttwo\n     3\tthree" {
		t.Fatalf("read: %q %s", text, code)
	}
	text, _ = e.call("s", "read", map[string]any{"file_path": "/workspace/f.txt", "offset": 2, "limit": 1})
	if text != "     2\ttwo\n[lines 2-2 of 3; read with offset=3 for more]" {
		t.Fatalf("read 2,1: %q", text)
	}
	if _, code := e.call("s", "read", map[string]any{"file_path": "nope.txt"}); code != sandbox.CodeNotFound {
		t.Errorf("missing file: %s", code)
	}
	if _, code := e.call("s", "read", map[string]any{"file_path": "."}); code != sandbox.CodeNotRegularFile {
		t.Errorf("directory: %s", code)
	}
	_ = os.WriteFile(filepath.Join(e.dir("s"), "bin"), []byte{0, 1, 2}, 0o644)
	if _, code := e.call("s", "read", map[string]any{"file_path": "bin"}); code != sandbox.CodeNotText {
		t.Errorf("binary: %s", code)
	}
}

func TestEditNeedsAnUnchangedRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0)
	f := filepath.Join(e.dir("s"), "a.go")
	if err := os.WriteFile(f, []byte("x := 1\ny := 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	edit := map[string]any{"file_path": "a.go", "old_string": "x := 1", "new_string": "x := 2"}
	if _, code := e.call("s", "edit", edit); code != sandbox.CodeNotObserved {
		t.Fatalf("edit before read: %s", code)
	}
	if _, code := e.call("s", "write", map[string]any{"file_path": "a.go", "content": "z"}); code != sandbox.CodeNotObserved {
		t.Fatalf("write over an unread file: %s", code)
	}
	e.call("s", "read", map[string]any{"file_path": "a.go"})
	if _, code := e.call("other", "edit", edit); code != sandbox.CodeNotFound {
		t.Fatalf("another session's workspace has no a.go: %s", code)
	}
	// Changed behind the tools' back (by a command): stale.
	if err := os.WriteFile(f, []byte("x := 1\ny := 1\n// changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, code := e.call("s", "edit", edit); code != sandbox.CodeStaleVersion {
		t.Fatalf("edit after a change: %s", code)
	}
	e.call("s", "read", map[string]any{"file_path": "a.go"})
	if _, code := e.call("s", "edit", map[string]any{"file_path": "a.go", "old_string": "w", "new_string": "v"}); code != sandbox.CodeEditNotFound {
		t.Fatalf("absent old_string: %s", code)
	}
	if _, code := e.call("s", "edit", map[string]any{"file_path": "a.go", "old_string": ":= 1", "new_string": ":= 3"}); code != sandbox.CodeAmbiguousEdit {
		t.Fatalf("two occurrences: %s", code)
	}
	res := e.reg.Call(context.Background(), t, "s", "edit", edit)
	if tooltest.Code(res) != "" || tooltest.Text(res) != "Edited a.go: replaced 1 occurrence." {
		t.Fatalf("edit: %q", tooltest.Text(res))
	}
	if len(res.Mutations) != 1 || res.Mutations[0].Path != "a.go" || res.Mutations[0].Kind != fs.KindUpdate ||
		len(res.Mutations[0].SHA256) != 64 || res.Mutations[0].Version != 1 {
		t.Fatalf("mutations %+v", res.Mutations)
	}
	// The tools' own change is observed: a second edit needs no new read.
	text, code := e.call("s", "edit", map[string]any{"file_path": "a.go", "old_string": ":= ", "new_string": "= ", "replace_all": true})
	if code != "" || text != "Edited a.go: replaced 2 occurrences." {
		t.Fatalf("replace_all: %q %s", text, code)
	}
	if b, _ := os.ReadFile(f); string(b) != "x = 2\ny = 1\n// changed\n" {
		t.Fatalf("content %q", b)
	}
}

func TestWriteCreatesAndReplaces(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0)
	res := e.reg.Call(context.Background(), t, "s", "write", map[string]any{"file_path": "d/e/new.txt", "content": "hi"})
	if tooltest.Text(res) != "Created d/e/new.txt (2 bytes)." || len(res.Mutations) != 1 || res.Mutations[0].Kind != fs.KindCreate {
		t.Fatalf("create: %q %+v", tooltest.Text(res), res.Mutations)
	}
	text, code := e.call("s", "write", map[string]any{"file_path": "d/e/new.txt", "content": "again"})
	if code != "" || text != "Wrote d/e/new.txt (5 bytes)." {
		t.Fatalf("replace after own write: %q %s", text, code)
	}
	if b, _ := os.ReadFile(filepath.Join(e.dir("s"), "d/e/new.txt")); string(b) != "again" {
		t.Fatalf("content %q", b)
	}
	if _, code := e.call("s", "write", map[string]any{"file_path": "d", "content": "x"}); code != sandbox.CodeNotRegularFile {
		t.Errorf("write over a directory: %s", code)
	}
	if _, code := e.call("s", "write", map[string]any{"file_path": "d/e/new.txt/x", "content": "x"}); code != sandbox.CodeNotDirectory {
		t.Errorf("write under a file: %s", code)
	}
}

func TestWriteRespectsTheQuota(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 10)
	if _, code := e.call("s", "write", map[string]any{"file_path": "a", "content": "12345678"}); code != "" {
		t.Fatal(code)
	}
	text, code := e.call("s", "write", map[string]any{"file_path": "b", "content": "123"})
	if code != sandbox.CodeTooLarge || !strings.Contains(text, "quota") {
		t.Fatalf("over quota: %q %s", text, code)
	}
}

// TestEscapesAreDenied: every form of path that leaves the workspace fails with
// FS_SANDBOX_DENIED, for every file tool, and nothing outside is read or written.
func TestEscapesAreDenied(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0)
	dir, other := e.dir("s"), e.dir("other")
	secret := filepath.Join(other, "secret.txt")
	if err := os.WriteFile(secret, []byte("other session"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"out": secret, "outdir": other, "rel": "../../other/files/secret.txt", "etc": "/etc"} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	paths := []string{"../other/files/secret.txt", "a/../../x", "/etc/passwd", secret, "/workspace/../etc/passwd",
		"out", "outdir/secret.txt", "rel", "etc/passwd", "outdir/new.txt"}
	for _, p := range paths {
		for _, call := range []struct {
			name string
			args map[string]any
		}{
			{"read", map[string]any{"file_path": p}},
			{"write", map[string]any{"file_path": p, "content": "pwned"}},
			{"edit", map[string]any{"file_path": p, "old_string": "other", "new_string": "pwned"}},
		} {
			text, code := e.call("s", call.name, call.args)
			if code != sandbox.CodeSandboxDenied {
				t.Errorf("%s %q: %q %s, want %s", call.name, p, text, code, sandbox.CodeSandboxDenied)
			}
			if !strings.Contains(p, other) && strings.Contains(text, other) {
				t.Errorf("%s %q names a host path: %q", call.name, p, text)
			}
		}
	}
	if b, _ := os.ReadFile(secret); string(b) != "other session" {
		t.Fatalf("the other workspace was changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(other, "new.txt")); err == nil {
		t.Fatal("a file was created outside the workspace")
	}
}

func TestNoSessionNoWorkspace(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0)
	if _, code := e.call("", "read", map[string]any{"file_path": "a"}); code != sandbox.CodeSandboxDenied {
		t.Fatalf("no agent: %s", code)
	}
}

// TestObservationsServeAnyReplica: a read on one replica lets an edit on another (sharing the
// workspace root) go through, and a fork's copy keeps the observation.
func TestObservationsServeAnyReplica(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	a, b := newEnvAt(t, root, 0), newEnvAt(t, root, 0)
	if err := os.WriteFile(filepath.Join(a.dir("s"), "f"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.call("s", "read", map[string]any{"file_path": "f"})
	if text, code := b.call("s", "edit", map[string]any{"file_path": "f", "old_string": "old", "new_string": "new"}); code != "" {
		t.Fatalf("edit on the other replica: %q %s", text, code)
	}
	if err := b.w.Copy("s", "child"); err != nil {
		t.Fatal(err)
	}
	if text, code := a.call("child", "edit", map[string]any{"file_path": "f", "old_string": "new", "new_string": "newer"}); code != "" {
		t.Fatalf("edit in the fork: %q %s", text, code)
	}
}

// newTenantEnv is the file tools over workspaces whose tenants may hold bound bytes in all.
func newTenantEnv(t *testing.T, bound int64) *env {
	t.Helper()
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: t.TempDir(), TenantQuotaBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	tools, err := fs.Tools(fs.Config{Workspaces: w})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, w: w, reg: tooltest.New(t, tools...)}
}

func (e *env) bind(session, tenant string) {
	e.t.Helper()
	if err := e.w.Bind(session, tenant); err != nil {
		e.t.Fatal(err)
	}
}

func TestWriteRespectsTheTenantQuota(t *testing.T) {
	t.Parallel()
	e := newTenantEnv(t, 100)
	e.bind("s1", "tenantA")
	e.bind("s2", "tenantA")
	e.bind("s3", "tenantB")
	if _, code := e.call("s1", "write", map[string]any{"file_path": "a", "content": strings.Repeat("a", 60)}); code != "" {
		t.Fatalf("first write: %s", code)
	}
	// The tenant's other session shares the bound: 60 + 41 > 100.
	text, code := e.call("s2", "write", map[string]any{"file_path": "b", "content": strings.Repeat("b", 41)})
	if code != sandbox.CodeQuotaExceeded || !strings.Contains(text, "quota") {
		t.Fatalf("write over the tenant bound: %q %s", text, code)
	}
	if _, err := os.Stat(filepath.Join(e.dir("s2"), "b")); !os.IsNotExist(err) {
		t.Fatalf("the refused write left a file: %v", err)
	}
	if _, code := e.call("s2", "write", map[string]any{"file_path": "b", "content": strings.Repeat("b", 40)}); code != "" {
		t.Fatalf("write up to the bound: %s", code)
	}
	if _, code := e.call("s2", "write", map[string]any{"file_path": "c", "content": "x"}); code != sandbox.CodeQuotaExceeded {
		t.Fatalf("one byte over the bound: %s", code)
	}
	// Another tenant is not affected, nor is a session bound to no tenant.
	if _, code := e.call("s3", "write", map[string]any{"file_path": "a", "content": strings.Repeat("c", 100)}); code != "" {
		t.Fatalf("other tenant: %s", code)
	}
	if _, code := e.call("unbound", "write", map[string]any{"file_path": "a", "content": strings.Repeat("d", 200)}); code != "" {
		t.Fatalf("unbound session: %s", code)
	}
	// Shrinking a file is always admitted, and makes room again.
	if _, code := e.call("s1", "read", map[string]any{"file_path": "a"}); code != "" {
		t.Fatal(code)
	}
	if _, code := e.call("s1", "write", map[string]any{"file_path": "a", "content": "small"}); code != "" {
		t.Fatalf("shrinking write: %s", code)
	}
	if _, code := e.call("s2", "write", map[string]any{"file_path": "c", "content": "x"}); code != "" {
		t.Fatalf("write after room was made: %s", code)
	}
	// Deleting a workspace takes its bytes off the tenant's usage.
	if err := e.w.Delete("s2"); err != nil {
		t.Fatal(err)
	}
	if n, err := e.w.TenantUsage("tenantA"); err != nil || n != 5 {
		t.Fatalf("usage after delete: %d %v, want 5", n, err)
	}
}

func TestEditRespectsTheTenantQuota(t *testing.T) {
	t.Parallel()
	e := newTenantEnv(t, 50)
	e.bind("s1", "tenantA")
	if _, code := e.call("s1", "write", map[string]any{"file_path": "f", "content": "hello world"}); code != "" {
		t.Fatal(code)
	}
	text, code := e.call("s1", "edit", map[string]any{"file_path": "f", "old_string": "world", "new_string": strings.Repeat("w", 45)})
	if code != sandbox.CodeQuotaExceeded || !strings.Contains(text, "bound is 50") {
		t.Fatalf("edit over the bound: %q %s", text, code)
	}
	if b, _ := os.ReadFile(filepath.Join(e.dir("s1"), "f")); string(b) != "hello world" {
		t.Fatalf("the refused edit changed the file: %q", b)
	}
	if _, code := e.call("s1", "edit", map[string]any{"file_path": "f", "old_string": "world", "new_string": strings.Repeat("w", 44)}); code != "" {
		t.Fatalf("edit up to the bound: %s", code)
	}
	// A file written behind the tools' back (a command, another replica) counts once measured.
	if err := os.WriteFile(filepath.Join(e.dir("s1"), "g"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := e.w.TenantUsage("tenantA"); err != nil || n != 51 {
		t.Fatalf("usage: %d %v, want 51", n, err)
	}
	if _, code := e.call("s1", "edit", map[string]any{"file_path": "f", "old_string": "hello", "new_string": "hello!"}); code != sandbox.CodeQuotaExceeded {
		t.Fatalf("edit while over the bound: %s", code)
	}
	if _, code := e.call("s1", "edit", map[string]any{"file_path": "f", "old_string": "hello", "new_string": "h"}); code != "" {
		t.Fatalf("a shrinking edit while over the bound: %s", code)
	}
}
