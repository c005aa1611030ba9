package search_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/sandbox"
	"github.com/dshd/dshd/pkg/tools/search"
	"github.com/dshd/dshd/pkg/tools/tooltest"
)

type env struct {
	t     *testing.T
	reg   *tooltest.Registry
	dir   string // session s's files
	other string // session other's files
}

func newEnv(t *testing.T) *env {
	t.Helper()
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	tools, err := search.Tools(search.Config{Workspaces: w})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, reg: tooltest.New(t, tools...)}
	for _, id := range []string{"s", "other"} {
		ws, err := w.Open(id)
		if err != nil {
			t.Fatal(err)
		}
		_ = ws.Close()
		if id == "s" {
			e.dir = ws.Dir
		} else {
			e.other = ws.Dir
		}
	}
	return e
}

func (e *env) file(rel, content string, age time.Duration) {
	e.t.Helper()
	p := filepath.Join(e.dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
	mt := time.Now().Add(-age)
	if err := os.Chtimes(p, mt, mt); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) call(name string, args map[string]any) (string, string) {
	e.t.Helper()
	res := e.reg.Call(context.Background(), e.t, "s", name, args)
	return tooltest.Text(res), tooltest.Code(res)
}

func TestGlobMatchesNewestFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.file("a.go", "", 3*time.Hour)
	e.file("pkg/b.go", "", time.Hour)
	e.file("pkg/sub/c.go", "", 2*time.Hour)
	e.file("pkg/d.ts", "", 0)
	e.file(".git/e.go", "", 0)
	for pat, want := range map[string]string{
		"*.go":                   "pkg/b.go\npkg/sub/c.go\na.go",
		"pkg/*.go":               "pkg/b.go",
		"pkg/**/*.go":            "pkg/b.go\npkg/sub/c.go",
		"**/*.{go,ts}":           "pkg/d.ts\npkg/b.go\npkg/sub/c.go\na.go",
		"*.rs":                   "No files found.",
		"/workspace/*.go":        "a.go",
		"/workspace/pkg/**/c.go": "pkg/sub/c.go",
	} {
		if got, code := e.call("glob", map[string]any{"pattern": pat}); got != want || code != "" {
			t.Errorf("glob %q = %q %s, want %q", pat, got, code, want)
		}
	}
	if got, _ := e.call("glob", map[string]any{"pattern": "*.go", "path": "pkg"}); got != "pkg/b.go\npkg/sub/c.go" {
		t.Errorf("glob under pkg: %q", got)
	}
	if _, code := e.call("glob", map[string]any{"pattern": "/etc/*"}); code != sandbox.CodeSandboxDenied {
		t.Errorf("glob /etc/*: %s", code)
	}
	for _, bad := range []string{"[", "a{b", "}", ""} {
		if _, code := e.call("glob", map[string]any{"pattern": bad}); code != search.CodeInvalidPattern {
			t.Errorf("glob %q: %s", bad, code)
		}
	}
}

func TestGlobShowsAtMost100(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := range 120 {
		e.file(fmt.Sprintf("f%03d.txt", i), "", time.Duration(i)*time.Second)
	}
	got, _ := e.call("glob", map[string]any{"pattern": "*.txt"})
	lines := strings.Split(got, "\n")
	if len(lines) != 101 || lines[0] != "f000.txt" || !strings.HasPrefix(lines[100], "[100 of 120 paths shown") {
		t.Fatalf("%d lines, first %q, last %q", len(lines), lines[0], lines[len(lines)-1])
	}
}

func TestGrep(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.file("a.go", "package a\nfunc Hello() {}\n", 0)
	e.file("b/b.txt", "hello world\nHello again\n", 0)
	e.file("bin.dat", "Hello\x00binary", 0)
	got, code := e.call("grep", map[string]any{"pattern": "Hello"})
	if code != "" || got != "a.go:2: func Hello() {}\nb/b.txt:2: Hello again" {
		t.Fatalf("grep: %q %s", got, code)
	}
	if got, _ := e.call("grep", map[string]any{"pattern": "(?i)hello", "include": "*.txt"}); got != "b/b.txt:1: hello world\nb/b.txt:2: Hello again" {
		t.Errorf("grep include: %q", got)
	}
	if got, _ := e.call("grep", map[string]any{"pattern": "package", "path": "a.go"}); got != "a.go:1: package a" {
		t.Errorf("grep one file: %q", got)
	}
	if _, code := e.call("grep", map[string]any{"pattern": "("}); code != search.CodeInvalidPattern {
		t.Errorf("bad regexp: %s", code)
	}
	if _, code := e.call("grep", map[string]any{"pattern": "x", "path": "missing"}); code != sandbox.CodeNotFound {
		t.Errorf("missing path: %s", code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := e.reg.Call(ctx, t, "s", "grep", map[string]any{"pattern": "x"})
	if c := tooltest.Code(res); c != search.CodeAborted && c != "ABORTED_BEFORE_DISPATCH" && c != "ABORTED" {
		t.Errorf("cancelled: %s", c)
	}
}

func TestGrepCapsMatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.file("many.txt", strings.Repeat("match\n", 300), 0)
	got, _ := e.call("grep", map[string]any{"pattern": "match"})
	lines := strings.Split(got, "\n")
	if len(lines) != 251 || lines[250] != "[250 of 300 matches shown; narrow the pattern, path or include]" {
		t.Fatalf("%d lines, last %q", len(lines), lines[len(lines)-1])
	}
}

// TestSearchEscapesAreDenied: a search path that leaves the workspace fails with
// FS_SANDBOX_DENIED, and a walk does not follow a link out of it.
func TestSearchEscapesAreDenied(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := os.WriteFile(filepath.Join(e.other, "secret.txt"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(e.other, filepath.Join(e.dir, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(e.dir, "etc")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"..", "../other/files", "/etc", e.other, "/workspace/..", "out", "etc", "out/secret.txt"} {
		for _, name := range []string{"glob", "grep"} {
			pat := map[string]string{"glob": "*", "grep": "."}[name]
			if got, code := e.call(name, map[string]any{"pattern": pat, "path": p}); code != sandbox.CodeSandboxDenied {
				t.Errorf("%s in %q: %q %s", name, p, got, code)
			}
		}
	}
	if got, _ := e.call("grep", map[string]any{"pattern": "secret"}); got != "No matches found." {
		t.Errorf("grep followed a link out: %q", got)
	}
	if got, _ := e.call("glob", map[string]any{"pattern": "**/secret.txt"}); got != "No files found." {
		t.Errorf("glob followed a link out: %q", got)
	}
}

// TestSearchWalkFollowsNoLinkSwappedIn (issue 17, finding 1: every host-side walk of a
// workspace): grep and glob list a directory and then open its entries by path, so a command may
// swap a listed directory or file for a link out of the workspace in between. Swapped at that
// moment, the links reach nothing outside: the walk's opens go through the workspace's os.Root.
func TestSearchWalkFollowsNoLinkSwappedIn(t *testing.T) {
	e := newEnv(t)
	e.file("d/x.txt", "needle in the workspace", 0)
	e.file("y.txt", "needle in the workspace too", 0)
	if err := os.WriteFile(filepath.Join(e.other, "secret.txt"), []byte("needle of another session"), 0o644); err != nil {
		t.Fatal(err)
	}
	swapped := map[string]bool{}
	search.SetWalkOpenHook(t, func(p string) {
		if swapped[p] {
			return
		}
		switch p {
		case "d": // a listed directory becomes a link to another session's files
			swapped[p] = true
			if err := os.Rename(filepath.Join(e.dir, "d"), filepath.Join(e.dir, ".d")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(e.other, filepath.Join(e.dir, "d")); err != nil {
				t.Fatal(err)
			}
		case "y.txt": // a listed file becomes a link to a file of another session
			swapped[p] = true
			if err := os.Remove(filepath.Join(e.dir, "y.txt")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(e.other, "secret.txt"), filepath.Join(e.dir, "y.txt")); err != nil {
				t.Fatal(err)
			}
		}
	})
	got, _ := e.call("grep", map[string]any{"pattern": "needle"})
	if !swapped["d"] || !swapped["y.txt"] {
		t.Fatalf("the walk did not open d and y.txt: %v", swapped)
	}
	if strings.Contains(got, "another session") || strings.Contains(got, "secret") {
		t.Errorf("grep followed a link swapped in: %q", got)
	}
	// Put d back for glob's own walk, and swap it again there.
	if err := os.Remove(filepath.Join(e.dir, "d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(e.dir, ".d"), filepath.Join(e.dir, "d")); err != nil {
		t.Fatal(err)
	}
	delete(swapped, "d")
	if got, _ := e.call("glob", map[string]any{"pattern": "**/secret.txt"}); got != "No files found." || !swapped["d"] {
		t.Errorf("glob followed a link swapped in: %q (swapped: %v)", got, swapped)
	}
}
