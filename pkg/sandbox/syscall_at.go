package sandbox

import (
	"syscall"
	"unsafe"
)

// The *at calls the syscall package does not export on every architecture (walk.go, copy.go).

// readlinkat reads the link name of dirfd into buf, returning the bytes read.
func readlinkat(dirfd int, name string, buf []byte) (int, error) {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return 0, err
	}
	n, _, errno := syscall.Syscall6(syscall.SYS_READLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// symlinkat creates the link name in dirfd, pointing at target.
func symlinkat(target string, dirfd int, name string) error {
	t, err := syscall.BytePtrFromString(target)
	if err != nil {
		return err
	}
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return err
	}
	_, _, errno := syscall.Syscall(syscall.SYS_SYMLINKAT, uintptr(unsafe.Pointer(t)), uintptr(dirfd), uintptr(unsafe.Pointer(p)))
	if errno != 0 {
		return errno
	}
	return nil
}

// atSymlinkNofollow is AT_SYMLINK_NOFOLLOW, the same on every Linux architecture.
const atSymlinkNofollow = 0x100

// lstatat is fstatat(dirfd, name, st, AT_SYMLINK_NOFOLLOW): the entry name itself, a link not
// followed (sysFstatat is the architecture's number of the call).
func lstatat(dirfd int, name string, st *syscall.Stat_t) error {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return err
	}
	_, _, errno := syscall.Syscall6(sysFstatat, uintptr(dirfd), uintptr(unsafe.Pointer(p)),
		uintptr(unsafe.Pointer(st)), atSymlinkNofollow, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
