package sandbox

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Copy copies the workspace of src, files and observations, to a new workspace dst, as a fork
// does (SES-15): the API's session create with `fork` calls it once the child session exists. A
// source without a workspace copies nothing. dst must not have a workspace yet. The copy is
// written under a temporary name and renamed into place, so dst is either absent or complete,
// and counts for the source's tenant (Bind). It is a snapshot of the source as it is now (not as
// of the fork's boundary: the log does not hold file contents), not atomic against a command of
// the source running meanwhile. Regular
// files, directories and symbolic links (as links) are copied with their modes (and owners, by a
// root server); other files are skipped.
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
	if err := copyTree(from, tmp); err != nil {
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
			return fmt.Errorf("sandbox: copy workspace: %w", err)
		}
	}
	return nil
}

// copyTree copies the tree at from into the existing directory to. It never follows a link.
func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		target := filepath.Join(to, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case rel == ".":
			err = os.Chmod(target, fi.Mode().Perm())
		case d.IsDir():
			err = os.Mkdir(target, fi.Mode().Perm())
		case d.Type()&fs.ModeSymlink != 0:
			var link string
			if link, err = os.Readlink(p); err == nil {
				err = os.Symlink(link, target)
			}
		case d.Type().IsRegular():
			err = copyFile(p, target, fi.Mode().Perm())
		default:
			return nil // sockets, fifos, devices
		}
		if err != nil {
			return err
		}
		return keepOwner(target, fi)
	})
}

func copyFile(from, to string, perm fs.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// keepOwner gives target the owner of fi when the server is root (a sandbox user's files stay
// its own); otherwise everything belongs to the server's user anyway.
func keepOwner(target string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || os.Geteuid() != 0 {
		return nil
	}
	return os.Lchown(target, int(st.Uid), int(st.Gid))
}
