//go:build !linux

package codemode

import "time"

// threadClock stands in for the CPU clock of a thread where there is none to read by thread id:
// it has no reading, so off Linux the CPU budget is wall time spent in JavaScript.
type threadClock struct{}

func currentThreadClock() threadClock { return threadClock{} }

func (threadClock) read() (time.Duration, bool) { return 0, false }
