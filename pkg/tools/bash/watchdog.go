package bash

import (
	"context"
	"errors"
	"time"

	"github.com/dshd/dshd/pkg/sandbox"
)

// The watchdog's pace: it measures the tenant's usage again after ten times as long as the last
// measurement took, but at least every maxInterval and at most every minInterval, so that a
// large tenant costs it at most about a tenth of a core and a small one is watched closely; the
// watchdogs of one tenant's concurrent commands share their measurements
// (sandbox.Workspace.TenantUsage), so that many commands cost no more than one (a
// command writes to the page cache at a GB/s or more: between two looks at 5 ms it adds a few
// MiB). What one command can add between two looks is also bounded per file: RLIMIT_FSIZE is the
// room left when it starts (fileLimit).
const (
	minInterval = 5 * time.Millisecond
	maxInterval = 250 * time.Millisecond
)

// errOverQuota is the cause of a command's context when the watchdog stopped it.
var errOverQuota = errors.New("bash: the tenant's workspaces went over their bound")

// watchdog watches the usage of a workspace's tenant while a command runs, and stops the command
// (cancels its context with errOverQuota) once the usage is over the bound, or over what it was
// when the command started, if that was more: a command of a tenant already over its bound may
// still run, to remove files, but not grow them.
type watchdog struct {
	done chan struct{}
}

// watch starts a watchdog over ws for a command run with ctx, which stop cancels; limit is the
// usage the command may reach. Call wait once the command is done.
func watch(ctx context.Context, ws *sandbox.Workspace, limit int64, stop context.CancelCauseFunc) *watchdog {
	w := &watchdog{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		timer := time.NewTimer(minInterval)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			start := time.Now()
			used, _, _, err := ws.TenantUsage()
			if err != nil || used > limit { // a measure that fails stops the command (fail closed)
				stop(errOverQuota)
				return
			}
			timer.Reset(min(max(10*time.Since(start), minInterval), maxInterval))
		}
	}()
	return w
}

// wait waits for the watchdog to end (the command's context is cancelled by then).
func (w *watchdog) wait() { <-w.done }

// room returns the bytes the tenant of ws may still add, and whether there is a bound: it bounds
// the size of any one file the command writes (RLIMIT_FSIZE), and the watchdog the sum. A measure
// that fails leaves no room (fail closed: the watchdog then stops the command at its first look).
func room(ws *sandbox.Workspace) (used, limit int64, ok bool) {
	used, _, ok, err := ws.TenantUsageAfresh() // a shared one may predate the last command's writes
	if !ok {
		return 0, 0, false
	}
	if err != nil {
		return ws.TenantQuota(), ws.TenantQuota(), true
	}
	return used, max(ws.TenantQuota(), used), true
}

// fileLimit is the RLIMIT_FSIZE of a command whose tenant may still add room bytes: room rounded
// up to the KiB that ulimit counts in, at least 1 KiB (0 would set no limit), and no more than
// the sandbox's default.
func fileLimit(room int64) int64 {
	return min(max((room+1023)/1024*1024, 1024), sandbox.DefaultLimits.FileBytes)
}
