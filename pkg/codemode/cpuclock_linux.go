package codemode

import (
	"syscall"
	"time"
	"unsafe"
)

// threadClock reads the CPU time (user and system) one OS thread has used. Any goroutine may read
// it while the thread lives. Linux names the CPU clock of a thread by its id: the clock id is the
// complemented thread id shifted by three bits, with the per-thread bit and the scheduler clock
// (CPUCLOCK_PERTHREAD_MASK | CPUCLOCK_SCHED: what CLOCK_THREAD_CPUTIME_ID reads for the caller).
type threadClock struct{ id int32 }

// currentThreadClock returns the clock of the calling goroutine's thread. It measures that
// goroutine only while the goroutine is locked to its thread (runtime.LockOSThread).
func currentThreadClock() threadClock {
	return threadClock{id: ^int32(syscall.Gettid())<<3 | 6}
}

// now returns the thread's CPU time so far, or 0 when the clock cannot be read (the thread is
// gone; the session reads it only while its thread is locked to it, so that does not happen).
func (c threadClock) now() time.Duration {
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, uintptr(c.id), uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}
