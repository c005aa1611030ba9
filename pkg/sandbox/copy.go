package sandbox

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"syscall"
	"time"
)

// Copy copies the workspace of src, files and observations, to a new workspace dst, as a fork
// does (SES-15): the API's session create with `fork` calls it once the child session exists. A
// source without a workspace copies nothing. dst must not have a workspace yet. The copy is
// written under a temporary name and renamed into place, so dst is either absent or complete,
// and counts for the source's tenant (Bind). It is a snapshot of the source as it is now (not as
// of the fork's boundary: the log does not hold file contents); the API holds the source's run
// lease meanwhile, so no turn of the source changes it. The copy follows nothing the tenant
// controls (walk.go): regular files, directories and symbolic links (as links, never followed)
// are copied with their permission bits (and owners, by a root server); FIFOs, sockets and
// devices are skipped, and so is an entry that changed between the listing and its open. A
// regular file is copied up to its size as listed. Copy does not check the tenant bound: a fork
// calls AdmitCopy first.
func (w *Workspaces) Copy(src, dst string) error {
	from, err := w.dir(src)
	if err != nil {
		return err
	}
	to, err := w.dir(dst)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(from); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if _, err := os.Lstat(to); err == nil {
		return fmt.Errorf("sandbox: copy workspace: %s already has a workspace", dst)
	}
	tmp, err := os.MkdirTemp(w.cfg.Root, ".copy-"+dst+"-")
	if err != nil {
		return fmt.Errorf("sandbox: copy workspace: %w", err)
	}
	if err := copyTree(from, tmp, os.Geteuid() == 0); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("sandbox: copy workspace: %w", err)
	}
	if err := os.Rename(tmp, to); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("sandbox: copy workspace: %w", err)
	}
	// The copy belongs to the source's tenant and counts for it.
	if tenant, _ := w.tenantOf(src); tenant != "" {
		if err := w.Bind(dst, tenant); err != nil {
			// An unbound copy would count for no tenant: it goes (review finding 13).
			_ = os.RemoveAll(to)
			w.unbind(dst)
			return fmt.Errorf("sandbox: copy workspace: %w", err)
		}
	}
	return nil
}

// copyTree copies the tree at from into the existing, empty directory to (the server's own,
// which no sandbox sees), walking from as walk.go describes and writing to relative to
// descriptors too (mkdirat, openat with O_EXCL|O_NOFOLLOW, symlinkat). chown gives every copy the
// owner of its source (a root server: a sandbox user's files stay its own).
func copyTree(from, to string, chown bool) error {
	src, err := openWalkRoot(from)
	if err != nil {
		return err
	}
	defer syscall.Close(src)
	dst, err := openWalkRoot(to)
	if err != nil {
		return err
	}
	defer syscall.Close(dst)
	var st syscall.Stat_t
	if err := syscall.Fstat(src, &st); err != nil {
		return err
	}
	c := treeCopy{chown: chown}
	if err := c.dir(src, dst, ".", 0); err != nil {
		return err
	}
	return c.finish(dst, &st)
}

// treeCopy is one copyTree.
type treeCopy struct{ chown bool }

// dir copies the entries of the directory srcfd into dstfd; rel is srcfd's path in the walk.
func (c treeCopy) dir(srcfd, dstfd int, rel string, depth int) error {
	if depth >= maxWalkDepth {
		return errTooDeep
	}
	entries, err := listDir(srcfd)
	if err != nil {
		return &fs.PathError{Op: "list", Path: rel, Err: err}
	}
	for _, e := range entries {
		p := path.Join(rel, e.name)
		switch e.kind() {
		case syscall.S_IFDIR:
			err = c.subdir(srcfd, dstfd, p, e, depth)
		case syscall.S_IFREG:
			err = c.file(srcfd, dstfd, p, e)
		case syscall.S_IFLNK:
			err = c.link(srcfd, dstfd, p, e)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// subdir copies the directory e of srcfd, when it is still the one listed.
func (c treeCopy) subdir(srcfd, dstfd int, p string, e listed, depth int) error {
	fd, st, ok, err := openListed(srcfd, p, e)
	if err != nil || !ok {
		return err
	}
	defer syscall.Close(fd)
	if err := syscall.Mkdirat(dstfd, e.name, 0o700); err != nil {
		return &fs.PathError{Op: "mkdir", Path: p, Err: err}
	}
	out, err := syscall.Openat(dstfd, e.name, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: p, Err: err}
	}
	defer syscall.Close(out)
	if err := c.dir(fd, out, p, depth+1); err != nil {
		return err
	}
	return c.finish(out, &st)
}

// file copies the regular file e of srcfd, when it is still the one listed, up to its listed
// size.
func (c treeCopy) file(srcfd, dstfd int, p string, e listed) error {
	fd, st, ok, err := openListed(srcfd, p, e)
	if err != nil || !ok {
		return err
	}
	in := os.NewFile(uintptr(fd), p)
	defer in.Close()
	ofd, err := syscall.Openat(dstfd, e.name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return &fs.PathError{Op: "create", Path: p, Err: err}
	}
	out := os.NewFile(uintptr(ofd), p)
	_, err = io.Copy(out, io.LimitReader(in, e.st.Size))
	if err == nil {
		err = c.finish(ofd, &st)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// link copies the symbolic link e of srcfd as a link (its target is a string, never resolved).
func (c treeCopy) link(srcfd, dstfd int, p string, e listed) error {
	if walkOpenHook != nil {
		walkOpenHook(p)
	}
	buf := make([]byte, syscall.PathMax)
	n, err := readlinkat(srcfd, e.name, buf)
	switch {
	case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENOENT):
		return nil // no longer a link
	case err != nil:
		return &fs.PathError{Op: "readlink", Path: p, Err: err}
	}
	if err := symlinkat(string(buf[:n]), dstfd, e.name); err != nil {
		return &fs.PathError{Op: "symlink", Path: p, Err: err}
	}
	if c.chown {
		if err := syscall.Fchownat(dstfd, e.name, int(e.st.Uid), int(e.st.Gid), atSymlinkNofollow); err != nil {
			return &fs.PathError{Op: "chown", Path: p, Err: err}
		}
	}
	return nil
}

// finish gives the copy fd the permission bits of its source st (and its owner, with chown).
func (c treeCopy) finish(fd int, st *syscall.Stat_t) error {
	if c.chown {
		if err := syscall.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	return syscall.Fchmod(fd, st.Mode&0o777)
}

// orphanAge is how old a copy's temporary directory (.copy-*) must be before NewWorkspaces takes
// it for one a crashed server left: a copy under way on another replica sharing the root is
// younger.
const orphanAge = time.Hour

// sweepCopies removes the temporary directories of copies older than orphanAge from root: what a
// server that died mid-copy left (review finding 13).
func sweepCopies(root string, now time.Time) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), ".copy-") {
			continue
		}
		if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) > orphanAge {
			_ = os.RemoveAll(filepath.Join(root, e.Name()))
		}
	}
}
