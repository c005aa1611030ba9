package fs

import (
	"context"
	"errors"
	iofs "io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/sandbox"
)

// WriteArgs are the arguments of `write`.
type WriteArgs struct {
	FilePath string `json:"file_path" jsonschema:"required,description=The file: relative to the workspace or absolute under /workspace."`
	Content  string `json:"content" jsonschema:"required,description=The complete new content."`
}

// EditArgs are the arguments of `edit`.
type EditArgs struct {
	FilePath   string `json:"file_path" jsonschema:"required,description=The file: relative to the workspace or absolute under /workspace."`
	OldString  string `json:"old_string" jsonschema:"required,description=The exact text to replace."`
	NewString  string `json:"new_string" jsonschema:"required,description=The text to put in its place."`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"description=Replace every occurrence; otherwise old_string must occur exactly once."`
}

// Mutation kinds of the file tools.
const (
	KindCreate = "create"
	KindUpdate = "update"
)

func (t tools) write() (*registry.Tool, error) {
	return registry.Define(registry.DefineSpec[WriteArgs, string]{
		Name: "write",
		Description: "Create a file of the workspace, or replace one with new content (parent directories are " +
			"created). An existing file must have been read first and be unchanged since.",
		PresentCall: func(a WriteArgs) string { return "write " + a.FilePath },
	}, t.writeBody)
}

func (t tools) writeBody(ctx context.Context, exec *registry.Execution, a WriteArgs) (string, error) {
	ws, rel, err := t.open(exec, a.FilePath)
	if err != nil {
		return "", err
	}
	defer ws.Close()
	if rel == "." {
		return "", fsError(sandbox.CodeNotRegularFile, "%s is the workspace directory", a.FilePath)
	}
	if int64(len(a.Content)) > t.cfg.MaxFileBytes {
		return "", fsError(sandbox.CodeTooLarge, "the content has %d bytes, more than the %d the file tools handle", len(a.Content), t.cfg.MaxFileBytes)
	}
	old, err := t.load(ws, rel)
	kind := KindUpdate
	switch {
	case errors.Is(err, iofs.ErrNotExist):
		kind, old.mode = KindCreate, 0o644
		if err := ws.MkdirAll(path.Dir(rel)); err != nil {
			return "", pathError(path.Dir(rel), err)
		}
	case err != nil:
		var coded registry.Coded
		if errors.As(err, &coded) {
			return "", err
		}
		return "", pathError(rel, err)
	default:
		if err := checkObserved(ws, rel, old); err != nil {
			return "", err
		}
	}
	if err := ws.CheckQuota(int64(len(a.Content) - len(old.data))); err != nil {
		return "", pathError(rel, err)
	}
	if err := t.commit(ctx, exec, ws, rel, []byte(a.Content), old.mode, kind); err != nil {
		ws.WriteFailed()
		return "", err
	}
	if kind == KindCreate {
		return "Created " + rel + " (" + fmtBytes(len(a.Content)) + ").", nil
	}
	return "Wrote " + rel + " (" + fmtBytes(len(a.Content)) + ").", nil
}

func (t tools) edit() (*registry.Tool, error) {
	return registry.Define(registry.DefineSpec[EditArgs, string]{
		Name: "edit",
		Description: "Replace exact text in a file of the workspace. The file must have been read first and be " +
			"unchanged since; old_string must occur exactly once unless replace_all is set.",
		PresentCall: func(a EditArgs) string { return "edit " + a.FilePath },
	}, t.editBody)
}

func (t tools) editBody(ctx context.Context, exec *registry.Execution, a EditArgs) (string, error) {
	if a.OldString == "" {
		return "", argsError(`"old_string" must not be empty`)
	}
	if a.OldString == a.NewString {
		return "", argsError(`"old_string" and "new_string" are the same`)
	}
	ws, rel, err := t.open(exec, a.FilePath)
	if err != nil {
		return "", err
	}
	defer ws.Close()
	f, err := t.loadReported(ws, rel)
	if err != nil {
		return "", err
	}
	if err := checkObserved(ws, rel, f); err != nil {
		return "", err
	}
	text := string(f.data)
	n := strings.Count(text, a.OldString)
	switch {
	case n == 0:
		return "", fsError(sandbox.CodeEditNotFound, "old_string was not found in %s", rel)
	case n > 1 && !a.ReplaceAll:
		return "", fsError(sandbox.CodeAmbiguousEdit, "old_string occurs %d times in %s: give more context to make it unique, or set replace_all", n, rel)
	}
	if !a.ReplaceAll {
		n = 1
	}
	updated := strings.Replace(text, a.OldString, a.NewString, n)
	if int64(len(updated)) > t.cfg.MaxFileBytes {
		return "", fsError(sandbox.CodeTooLarge, "the edited file would have %d bytes, more than the %d the file tools handle", len(updated), t.cfg.MaxFileBytes)
	}
	if err := ws.CheckQuota(int64(len(updated) - len(text))); err != nil {
		return "", pathError(rel, err)
	}
	if err := t.commit(ctx, exec, ws, rel, []byte(updated), f.mode, KindUpdate); err != nil {
		ws.WriteFailed()
		return "", err
	}
	if n == 1 {
		return "Edited " + rel + ": replaced 1 occurrence.", nil
	}
	return "Edited " + rel + ": replaced " + strconv.Itoa(n) + " occurrences.", nil
}
