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
// The zero value (and a clock whose reads fail) has no reading: the watch then charges wall time.
type threadClock struct {
	id    int32
	valid bool
}

// currentThreadClock returns the clock of the calling goroutine's thread. It measures that
// goroutine only while the goroutine is locked to its thread (runtime.LockOSThread).
func currentThreadClock() threadClock {
	return threadClock{id: ^int32(syscall.Gettid())<<3 | 6, valid: true}
}

// read returns the thread's CPU time so far; false when the clock cannot be read (the thread is
// gone, or the kernel refuses per-thread clocks), and the caller must charge wall time instead.
func (c threadClock) read() (time.Duration, bool) {
	if !c.valid {
		return 0, false
	}
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, uintptr(c.id), uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
