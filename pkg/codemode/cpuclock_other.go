//go:build !linux

package codemode

import "time"

// threadClock stands in for the CPU clock of a thread where there is none to read by thread id:
// it reads the monotonic clock, so off Linux the CPU budget is wall time spent in JavaScript.
type threadClock struct{}

var clockBase = time.Now()

func currentThreadClock() threadClock { return threadClock{} }

func (threadClock) now() time.Duration { return time.Since(clockBase) }
