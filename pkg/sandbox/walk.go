package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"

	"syscall"
)

// Host-side walks of a workspace. A workspace's files belong to its tenant: a command of the
// session may rename, replace or link anything in it while the server walks it, with the
// server's privileges. So a walk here never resolves a path of several components and never
// follows a link: it opens the walk's root once (O_NOFOLLOW, its components are the server's),
// lists each directory through its file descriptor (getdents, then fstatat without following),
// and opens each listed entry by its single name relative to that descriptor with O_NOFOLLOW
// and O_NONBLOCK, then checks the open file's fstat against the listing (device, inode and
// type). An entry swapped meanwhile (a link fails to open, anything else differs from the
// listing) is skipped. Only directories and regular files are ever opened, so a FIFO swapped in
// is seen by its type and closed (O_NONBLOCK: its open does not wait for a writer); sockets,
// FIFOs and devices are skipped. A hard link is an inode the tenant could already read (the
// sandbox sees no host file it could link), so it is copied as a regular file.
//
// Copy (copy.go) and the measures of the disk bounds (treeBytes, Workspace.Usage) walk this
// way; the file tools and glob/grep go through the workspace's os.Root, which resolves every
// path beneath it (openat2 RESOLVE_BENEATH, or component by component without following a link
// out of it).

// maxWalkDepth bounds how deep a walk descends: a walk holds a descriptor per level (a copy
// two). A tree nested deeper is an error (errTooDeep), not a partial result.
const maxWalkDepth = 1024

// errTooDeep is a workspace nested deeper than maxWalkDepth directories.
var errTooDeep = fmt.Errorf("directories nested more than %d levels deep", maxWalkDepth)

// walkOpenHook, set only by tests (export_test.go), is called between the listing of an entry
// and its open, with its slash-separated path relative to the walk's root: where a tenant's
// command would swap it.
var walkOpenHook func(rel string)

// listed is one entry of a directory as its listing saw it (fstatat, not following a link).
type listed struct {
	name string
	st   syscall.Stat_t
}

func (e listed) kind() uint32 { return e.st.Mode & syscall.S_IFMT }

// openWalkRoot opens the directory at p, the root of a walk, without following a final link.
func openWalkRoot(p string) (int, error) {
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return fd, nil
}

// listDir returns the entries of the directory dirfd in name order, each with its own lstat;
// an entry removed between getdents and its fstatat is left out. dirfd's offset is consumed.
func listDir(dirfd int) ([]listed, error) {
	var names []string
	buf := make([]byte, 32<<10)
	for {
		n, err := syscall.Getdents(dirfd, buf)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		_, _, names = syscall.ParseDirent(buf[:n], -1, names)
	}
	slices.Sort(names)
	out := make([]listed, 0, len(names))
	for _, name := range names {
		e := listed{name: name}
		if err := lstatat(dirfd, name, &e.st); err != nil {
			if errors.Is(err, syscall.ENOENT) {
				continue
			}
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// openListed opens the directory or regular file e of dirfd (rel is its path for the hook), as
// listed: ok is false when the entry is no longer what the listing saw (gone, a link now, another
// inode or type), and the entry is to be skipped. The caller closes fd.
func openListed(dirfd int, rel string, e listed) (fd int, st syscall.Stat_t, ok bool, err error) {
	if walkOpenHook != nil {
		walkOpenHook(rel)
	}
	flags := syscall.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_NONBLOCK | syscall.O_NOCTTY | syscall.O_CLOEXEC
	switch e.kind() {
	case syscall.S_IFDIR:
		flags |= syscall.O_DIRECTORY
	case syscall.S_IFREG:
	default:
		return -1, st, false, nil // never opened
	}
	fd, err = syscall.Openat(dirfd, e.name, flags, 0)
	switch {
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ENXIO):
		return -1, st, false, nil // swapped: gone, or a link now
	case err != nil:
		return -1, st, false, &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	if err := syscall.Fstat(fd, &st); err != nil {
		_ = syscall.Close(fd)
		return -1, st, false, &fs.PathError{Op: "stat", Path: rel, Err: err}
	}
	if st.Dev != e.st.Dev || st.Ino != e.st.Ino || st.Mode&syscall.S_IFMT != e.kind() {
		_ = syscall.Close(fd)
		return -1, st, false, nil // another file than the one listed
	}
	return fd, st, true, nil
}

// treeBytes is the bytes of the regular files under the directory dir, walked as described
// above (a missing dir holds 0 bytes): a file counts its size or the space allocated to it beyond
// its last block, whichever is more (allocated), so that space reserved past the end of a file
// (fallocate with FALLOC_FL_KEEP_SIZE, which RLIMIT_FSIZE does not stop either) counts too. A
// directory that cannot be listed is an error, not 0 bytes (a measure fails closed). A tree nested
// deeper than maxWalkDepth is errTooDeep, with the bytes counted above the too-deep level.
func treeBytes(dir string) (int64, error) {
	fd, err := openWalkRoot(dir)
	if errors.Is(err, syscall.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer syscall.Close(fd)
	return dirBytes(fd, ".", 0)
}

// allocated is what a regular file counts for: its size, plus the space allocated to it past its
// size rounded up to the file system's block (so that a small file counts its size, not a block).
func allocated(st *syscall.Stat_t) int64 {
	n := st.Size
	blk := int64(st.Blksize)
	if blk <= 0 {
		blk = 4096
	}
	if extra := st.Blocks*512 - (st.Size+blk-1)/blk*blk; extra > 0 {
		n += extra
	}
	return n
}

func dirBytes(dirfd int, rel string, depth int) (int64, error) {
	if depth >= maxWalkDepth {
		return 0, errTooDeep
	}
	entries, err := listDir(dirfd)
	if err != nil {
		return 0, &fs.PathError{Op: "list", Path: rel, Err: err}
	}
	var n int64
	for _, e := range entries {
		switch e.kind() {
		case syscall.S_IFREG:
			n += allocated(&e.st)
		case syscall.S_IFDIR:
			p := path.Join(rel, e.name)
			fd, _, ok, err := openListed(dirfd, p, e)
			if err != nil {
				return n, err
			}
			if !ok {
				continue
			}
			m, err := dirBytes(fd, p, depth+1)
			_ = syscall.Close(fd)
			n += m
			if err != nil {
				return n, err
			}
		}
	}
	return n, nil
}
