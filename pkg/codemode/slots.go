package codemode

import (
	"context"
	"fmt"

	"github.com/dshd/dshd/pkg/fairq"
)

// The program slots: a replica runs at most Config.MaxConcurrent programs at once (sized to its
// cores by default), so that run_code programs, which compute in the server process, cannot
// take every core from the other tenants' turns. A call past that waits for a slot in a fair
// queue (pkg/fairq): one FIFO per tenant, served round robin, so a tenant that starts many
// programs waits its turn beside one that starts one. The wait counts against the call's own
// timeout (the registry's tool timeout) and ends with a cancel; it does not count against the
// program's CPU or wall-time limit, which start when the program does.

// TenantFunc returns the tenant of an agent (a session id), by which waiting programs are queued
// fairly; "" puts the agent's programs in one queue with every other agent of no tenant.
type TenantFunc func(agent string) string

// waitSlot waits for a program slot for tenant. It returns the ticket to release when the
// program has run, or the run's failure when the call ended (timed out, cancelled) first.
func (rt *Runtime) waitSlot(ctx context.Context, tenant string) (*fairq.Ticket, *runError) {
	tk := rt.slots.Enqueue(tenant)
	select {
	case <-tk.Ready():
		return tk, nil
	default:
	}
	if rt.onQueued != nil {
		rt.onQueued()
	}
	if err := tk.Wait(ctx); err != nil {
		e := ended(ctx)
		e.msg += fmt.Sprintf(" while it waited for a program slot (this replica runs at most %d programs at once)", rt.cfg.MaxConcurrent)
		return nil, e
	}
	return tk, nil
}
