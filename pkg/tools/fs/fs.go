// Package fs is the file tools over a session's workspace (pkg/sandbox): `read` (line-numbered,
// parallel-safe), `write` (create, or replace a file already read) and `edit` (literal replace in
// a file already read). A path is relative to the workspace, or absolute under /workspace; one
// that leaves it (`..`, another absolute path, a symbolic link out) fails with
// FS_SANDBOX_DENIED.
//
// Read-before-edit: `read` records the version (SHA-256) of the file it read as an observation of
// the workspace (sandbox.Workspace.Observe: a file next to the workspace's files, on the storage
// every replica shares, so any replica serves the next call, and the version also goes into the
// read's meta in the log). `edit`, and `write` over an existing file, fail with FS_NOT_OBSERVED
// when the file was never read and with FS_STALE_VERSION when it changed since (a command, a
// fork's copy); a successful write or edit records the new version, and its file mutation
// (RES-6).
//
// Quotas: a write or edit that would take the workspace over its quota fails with FS_TOO_LARGE,
// and one that would take the workspaces of the session's tenant over the tenant bound
// (sandbox.WorkspacesConfig.TenantQuotaBytes) with FS_QUOTA_EXCEEDED; a write that shrinks a
// file is always admitted.
package fs

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path"
	"syscall"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/sandbox"
)

// Config configures the file tools.
type Config struct {
	// Workspaces holds the sessions' workspaces. Required.
	Workspaces *sandbox.Workspaces
	// MaxFileBytes bounds the files read, written and edited (FS_TOO_LARGE). Default
	// DefaultMaxFileBytes.
	MaxFileBytes int64
}

// DefaultMaxFileBytes is the default of Config.MaxFileBytes: 16 MiB.
const DefaultMaxFileBytes = 16 << 20

// ErrorName is the error name of the file tools' coded errors.
const ErrorName = "FsError"

// Tools returns fresh definitions of `read`, `write` and `edit`.
func Tools(cfg Config) ([]*registry.Tool, error) {
	if cfg.Workspaces == nil {
		return nil, errors.New("fs: Workspaces is required")
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = DefaultMaxFileBytes
	}
	t := tools{cfg}
	var out []*registry.Tool
	for _, def := range []func() (*registry.Tool, error){t.read, t.write, t.edit} {
		tl, err := def()
		if err != nil {
			return nil, err
		}
		out = append(out, tl)
	}
	return out, nil
}

type tools struct{ cfg Config }

func fsError(code, format string, args ...any) error {
	return registry.NewError(ErrorName, code, format, args...)
}

func argsError(format string, args ...any) error {
	return registry.NewError(registry.NameToolArgs, fault.CodeInvalidArgs, "invalid arguments: "+format, args...)
}

// pathError reports a failed operation on p with the code of err, without host paths.
func pathError(p string, err error) error {
	reason := err.Error()
	var pe *iofs.PathError
	if errors.As(err, &pe) {
		reason = pe.Err.Error()
	}
	switch code := sandbox.Code(err); code {
	case sandbox.CodeSandboxDenied:
		return fsError(code, "%s: %s", p, sandbox.ErrOutside)
	case sandbox.CodeNotFound:
		return fsError(code, "%s: no such file", p)
	case sandbox.CodeTooLarge, sandbox.CodeQuotaExceeded:
		return fsError(code, "%s: %v", p, err)
	default:
		return fsError(code, "%s: %s", p, reason)
	}
}

func aborted() error { return fsError(sandbox.CodeAborted, "tool call aborted") }

// open opens the calling session's workspace and resolves p in it.
func (t tools) open(exec *registry.Execution, p string) (*sandbox.Workspace, string, error) {
	if exec.Agent == "" {
		return nil, "", fsError(sandbox.CodeSandboxDenied, "the call has no session, so no workspace")
	}
	ws, err := t.cfg.Workspaces.Open(exec.Agent)
	if err != nil {
		return nil, "", fsError(sandbox.CodeIOError, "the workspace cannot be opened")
	}
	rel, err := ws.Rel(p)
	if err != nil {
		_ = ws.Close()
		return nil, "", pathError(p, err)
	}
	return ws, rel, nil
}

// file is a regular file's content and version.
type file struct {
	data   []byte
	mode   os.FileMode
	sha256 string
}

// load reads the regular file rel (following links inside the workspace only). A missing file
// is an error satisfying errors.Is(err, fs.ErrNotExist) before it is reported: callers that may
// create it check that first.
func (t tools) load(ws *sandbox.Workspace, rel string) (file, error) {
	f, err := ws.Root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return file{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return file{}, err
	case fi.IsDir():
		return file{}, fsError(sandbox.CodeNotRegularFile, "%s is a directory", rel)
	case !fi.Mode().IsRegular():
		return file{}, fsError(sandbox.CodeNotRegularFile, "%s is not a regular file", rel)
	case fi.Size() > t.cfg.MaxFileBytes:
		return file{}, fsError(sandbox.CodeTooLarge, "%s has %d bytes, more than the %d the file tools handle", rel, fi.Size(), t.cfg.MaxFileBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, t.cfg.MaxFileBytes+1))
	if err != nil {
		return file{}, err
	}
	if int64(len(data)) > t.cfg.MaxFileBytes {
		return file{}, fsError(sandbox.CodeTooLarge, "%s has more than the %d bytes the file tools handle", rel, t.cfg.MaxFileBytes)
	}
	return file{data: data, mode: fi.Mode().Perm(), sha256: sum256(data)}, nil
}

// loadReported is load with every error reported as the tool's.
func (t tools) loadReported(ws *sandbox.Workspace, rel string) (file, error) {
	f, err := t.load(ws, rel)
	var coded registry.Coded
	if err != nil && !errors.As(err, &coded) {
		return file{}, pathError(rel, err)
	}
	return f, err
}

// checkObserved is read-before-edit: f must be the version last observed.
func checkObserved(ws *sandbox.Workspace, rel string, f file) error {
	v, ok, err := ws.Observed(rel)
	switch {
	case err != nil:
		return fsError(sandbox.CodeIOError, "%s: the read-before-edit observations cannot be read", rel)
	case !ok:
		return fsError(sandbox.CodeNotObserved, "%s has not been read in this session: read it before changing it", rel)
	case v != f.sha256:
		return fsError(sandbox.CodeStaleVersion, "%s has changed since it was last read: read it again before changing it", rel)
	}
	return nil
}

// commit writes data to rel in the workspace, records its version and the file mutation.
func (t tools) commit(ctx context.Context, exec *registry.Execution, ws *sandbox.Workspace, rel string, data []byte,
	perm os.FileMode, kind string) error {
	if ctx.Err() != nil {
		return aborted()
	}
	if err := writeFile(ws, rel, data, perm); err != nil {
		return pathError(rel, err)
	}
	if err := ws.Observe(rel, sum256(data)); err != nil {
		return fsError(sandbox.CodeIOError, "%s was written but its version could not be recorded", rel)
	}
	s1 := sha1.Sum(data)
	exec.RecordFileMutation(registry.FileMutation{Path: rel, Kind: kind, SHA1: hex.EncodeToString(s1[:]), SHA256: sum256(data)})
	return nil
}

// writeFile replaces rel with data: a new file is renamed into place, so a reader never sees half
// of it. A symbolic link (to a file inside the workspace) is written through instead.
func writeFile(ws *sandbox.Workspace, rel string, data []byte, perm os.FileMode) error {
	if fi, err := ws.Root.Lstat(rel); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		f, err := ws.Root.OpenFile(rel, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return err
		}
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := path.Join(path.Dir(rel), ".dshd-"+hex.EncodeToString(rnd[:])+".tmp")
	f, err := ws.Root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = ws.Own(tmp)
	}
	if err == nil {
		err = ws.Root.Rename(tmp, rel)
	}
	if err != nil {
		_ = ws.Root.Remove(tmp)
	}
	return err
}

func sum256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fmtBytes is a size for messages.
func fmtBytes(n int) string {
	if n == 1 {
		return "1 byte"
	}
	return fmt.Sprintf("%d bytes", n)
}
