package e2e

import "syscall"

// childAttr kills a child process when the test process dies (a panic, a timeout), so no
// replica outlives its test. The signal follows the thread that started the child; no goroutine
// of this package locks an OS thread, so Go never retires that thread early.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
