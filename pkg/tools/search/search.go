// Package search is `glob` and `grep` over a session's workspace (pkg/sandbox), implemented in Go
// (no ripgrep): `glob` lists paths matching a pattern, newest first, at most MaxGlobPaths;
// `grep` lists the lines matching a regular expression (RE2 syntax), at most MaxGrepMatches.
// Both skip `.git` directories and do not follow symbolic links while walking. A path that
// leaves the workspace fails with FS_SANDBOX_DENIED; an invalid pattern with
// SEARCH_INVALID_PATTERN; a cancelled search with SEARCH_ABORTED.
package search

import (
	"context"
	"errors"
	iofs "io/fs"
	"strings"

	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/sandbox"
)

// Config configures the search tools.
type Config struct {
	// Workspaces holds the sessions' workspaces. Required.
	Workspaces *sandbox.Workspaces
}

// Error codes of the search tools (docs/rules.md, tool-fs-search).
const (
	CodeFailed         = "SEARCH_FAILED"
	CodeAborted        = "SEARCH_ABORTED"
	CodeInvalidPattern = "SEARCH_INVALID_PATTERN"
)

// ErrorName is the error name of the search tools' coded errors.
const ErrorName = "SearchError"

// Limits.
const (
	// MaxGlobPaths is how many paths `glob` lists.
	MaxGlobPaths = 100
	// MaxGrepMatches is how many matching lines `grep` lists.
	MaxGrepMatches = 250
	// MaxCountedMatches is where `grep` stops counting matches.
	MaxCountedMatches = 10_000
	// MaxEntries is how many directory entries one search walks at most.
	MaxEntries = 200_000
	// MaxGrepFileBytes: larger files are not searched.
	MaxGrepFileBytes = 10 << 20
	// MaxLineRunes clips matching lines in grep's output.
	MaxLineRunes = 300
)

// Tools returns fresh definitions of `glob` and `grep`.
func Tools(cfg Config) ([]*registry.Tool, error) {
	if cfg.Workspaces == nil {
		return nil, errors.New("search: Workspaces is required")
	}
	t := tools{cfg}
	g, err := t.glob()
	if err != nil {
		return nil, err
	}
	r, err := t.grep()
	if err != nil {
		return nil, err
	}
	return []*registry.Tool{g, r}, nil
}

type tools struct{ cfg Config }

func searchError(code, format string, args ...any) error {
	return registry.NewError(ErrorName, code, format, args...)
}

func aborted() error { return searchError(CodeAborted, "search aborted") }

// open opens the calling session's workspace and resolves the search path p ("" is the
// workspace), which must exist; dir reports whether it is a directory.
func (t tools) open(exec *registry.Execution, p string) (ws *sandbox.Workspace, rel string, dir bool, err error) {
	if exec.Agent == "" {
		return nil, "", false, registry.NewError("FsError", sandbox.CodeSandboxDenied, "the call has no session, so no workspace")
	}
	if ws, err = t.cfg.Workspaces.Open(exec.Agent); err != nil {
		return nil, "", false, searchError(CodeFailed, "the workspace cannot be opened")
	}
	if rel, err = ws.Rel(p); err == nil {
		var fi iofs.FileInfo
		if fi, err = ws.Root.Stat(rel); err == nil {
			return ws, rel, fi.IsDir(), nil
		}
	}
	_ = ws.Close()
	code := sandbox.Code(err)
	switch code {
	case sandbox.CodeSandboxDenied:
		return nil, "", false, registry.NewError("FsError", code, "%s: %s", p, sandbox.ErrOutside)
	case sandbox.CodeNotFound:
		return nil, "", false, registry.NewError("FsError", code, "%s: no such file or directory", p)
	}
	return nil, "", false, searchError(CodeFailed, "%s: cannot be searched", p)
}

// walk calls fn for every non-directory entry under base (or base itself when it is a file),
// with its path relative to the workspace, skipping .git directories, stopping at MaxEntries
// (capped reports that) and at ctx's end (an aborted error).
func walk(ctx context.Context, ws *sandbox.Workspace, base string, fn func(p string, d iofs.DirEntry) error) (capped bool, err error) {
	n := 0
	fsys := ws.Root.FS()
	if walkOpenHook != nil {
		fsys = hookedFS{fsys}
	}
	err = iofs.WalkDir(fsys, base, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			if p == base {
				return err
			}
			return nil // unreadable entries are skipped
		}
		if n++; n > MaxEntries {
			capped = true
			return iofs.SkipAll
		}
		if n%256 == 0 && ctx.Err() != nil {
			return aborted()
		}
		if d.IsDir() {
			if d.Name() == ".git" && p != base {
				return iofs.SkipDir
			}
			return nil
		}
		return fn(p, d)
	})
	if err == nil && ctx.Err() != nil {
		err = aborted()
	}
	return capped, err
}

// A walk lists a directory, then opens its entries by path: a command of the session may swap an
// entry for a link meanwhile. Every open goes through the workspace's os.Root, which resolves the
// path beneath the workspace at the time of the open and refuses a link out of it, so the swap
// reaches nothing outside (TestSearchWalkFollowsNoLinkSwappedIn).

// walkOpenHook, set only by tests (export_test.go), is called before each open of a walk (a
// directory, a file grep reads), with its path: where a command would swap it.
var walkOpenHook func(p string)

// hookedFS calls walkOpenHook before each open (tests only).
type hookedFS struct{ iofs.FS }

func (h hookedFS) Open(name string) (iofs.File, error) {
	walkOpenHook(name)
	return h.FS.Open(name)
}

// under returns p relative to base ("." for the workspace).
func under(p, base string) string {
	if base == "." {
		return p
	}
	return strings.TrimPrefix(strings.TrimPrefix(p, base), "/")
}
