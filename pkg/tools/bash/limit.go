package bash

import (
	"context"
	"fmt"
	"time"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/sandbox"
)

// The command slots (Config.Slots): a replica runs at most Slots.Limit() commands at once, at
// most Slots.Share() of one tenant (the tenant its workspace is bound to), so that one tenant's
// commands cannot take every core from the others. A command past either waits for a slot in
// the fair queue (one FIFO per tenant, served round robin). The wait counts against the
// command's timeout: a command that waited w runs for at most its timeout less w, and one that
// waited its whole timeout is not run (a result, not an error, like a command that timed out).

// waitSlot waits for a command slot for the workspace's tenant, within timeout. It returns the
// func that gives the slot back and what is left of the timeout; left is 0 when the command
// must not run (the wait used its timeout). The error is the abort of a cancelled call.
func (t tool) waitSlot(ctx context.Context, ws *sandbox.Workspace, timeout time.Duration) (release func(), left time.Duration, err error) {
	q := t.cfg.Slots
	if q == nil {
		return func() {}, timeout, nil
	}
	tk := q.Enqueue(ws.Tenant())
	select {
	case <-tk.Ready():
		return tk.Release, timeout, nil
	default:
	}
	if t.cfg.onQueued != nil {
		t.cfg.onQueued()
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := tk.Wait(wctx); err != nil {
		if ctx.Err() != nil {
			return nil, 0, registry.NewError(registry.NameAbort, fault.CodeAborted, "tool call aborted")
		}
		return func() {}, 0, nil
	}
	if left = timeout - time.Since(start); left <= 0 {
		tk.Release()
		return func() {}, 0, nil
	}
	return tk.Release, left, nil
}

// notRun is the result of a command that waited its whole timeout for a slot.
func (t tool) notRun(timeout time.Duration) string {
	q := t.cfg.Slots
	return fmt.Sprintf("[not run: the command waited its whole timeout of %dms for a command slot; this replica runs at most %d commands at once, "+
		"at most %d of one tenant: try again when other commands have finished]", timeout.Milliseconds(), q.Limit(), q.Share())
}
