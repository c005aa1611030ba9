package search

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/sandbox"
)

// GlobArgs are the arguments of `glob`.
type GlobArgs struct {
	Pattern string `json:"pattern" jsonschema:"required,description=A glob such as **/*.go or src/*.{ts,tsx}; without / it matches file names at any depth."`
	Path    string `json:"path,omitempty" jsonschema:"description=The directory to search, relative to the workspace or under /workspace. Default: the workspace."`
}

func (t tools) glob() (*registry.Tool, error) {
	return registry.Define(registry.DefineSpec[GlobArgs, string]{
		Name: "glob",
		Description: fmt.Sprintf("List the workspace files whose paths match a glob pattern, newest first (at most %d). "+
			"`**` matches any number of directories, `{a,b}` alternatives; .git is skipped.", MaxGlobPaths),
		PresentCall: func(a GlobArgs) string { return "glob " + a.Pattern },
	}, t.globBody)
}

type found struct {
	path  string
	mtime time.Time
}

func (t tools) globBody(ctx context.Context, exec *registry.Execution, a GlobArgs) (string, error) {
	ws, base, dir, err := t.open(exec, a.Path)
	if err != nil {
		return "", err
	}
	defer ws.Close()
	if !dir {
		return "", registry.NewError("FsError", sandbox.CodeNotDirectory, "%s is not a directory", base)
	}
	// An absolute pattern names workspace paths (/workspace/**/*.go); a relative one, paths under
	// the search directory.
	raw, fromRoot := a.Pattern, path.IsAbs(a.Pattern)
	if fromRoot {
		rel, err := ws.Rel(a.Pattern)
		if err != nil {
			return "", registry.NewError("FsError", sandbox.CodeSandboxDenied, "%s: %s", a.Pattern, sandbox.ErrOutside)
		}
		raw = rel
	}
	pat, bad := compileGlob(raw, fromRoot)
	if pat == nil {
		return "", searchError(CodeInvalidPattern, "invalid glob %q: %s", a.Pattern, bad)
	}
	var hits []found
	capped, err := walk(ctx, ws, base, func(p string, d iofs.DirEntry) error {
		name := under(p, base)
		if fromRoot {
			name = p
		}
		if pat.match(name) {
			f := found{path: p}
			if fi, err := d.Info(); err == nil {
				f.mtime = fi.ModTime()
			}
			hits = append(hits, f)
		}
		return nil
	})
	if err != nil {
		return "", walkError(err, base)
	}
	sort.Slice(hits, func(i, j int) bool {
		if !hits[i].mtime.Equal(hits[j].mtime) {
			return hits[i].mtime.After(hits[j].mtime)
		}
		return hits[i].path < hits[j].path
	})
	return renderGlob(hits, capped), nil
}

func renderGlob(hits []found, capped bool) string {
	if len(hits) == 0 {
		s := "No files found."
		if capped {
			s += fmt.Sprintf(" [the search stopped after %d entries]", MaxEntries)
		}
		return s
	}
	var b strings.Builder
	for i, h := range hits {
		if i == MaxGlobPaths {
			fmt.Fprintf(&b, "[%d of %d paths shown, newest first; narrow the pattern or the path]\n", MaxGlobPaths, len(hits))
			break
		}
		b.WriteString(path.Clean(h.path) + "\n")
	}
	if capped {
		fmt.Fprintf(&b, "[the search stopped after %d entries]\n", MaxEntries)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// walkError reports a walk's failure: an aborted search as itself, anything else as
// SEARCH_FAILED.
func walkError(err error, base string) error {
	var c registry.Coded
	if errors.As(err, &c) {
		return c
	}
	return searchError(CodeFailed, "%s cannot be searched", base)
}
