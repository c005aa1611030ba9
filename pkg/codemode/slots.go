package codemode

import (
	"context"
	"fmt"

	"github.com/dshd/dshd/pkg/fairq"
)

// The program slots: a replica runs JavaScript for at most Config.MaxConcurrent programs at once
// (sized to its cores by default), so that run_code programs, which compute in the server
// process, cannot take every core from the other tenants' turns. A run holds a slot only while
// it is in JavaScript: it gives the slot back while it waits for its tools, and takes one again
// (waiting its turn) to go on with their results, so programs that wait for long tool calls do
// not hold back the others. A run waits for a slot in a fair queue (pkg/fairq): one FIFO per
// tenant, served round robin, so a tenant that starts many programs waits its turn beside one
// that starts one. The wait counts against the call's own timeout (the registry's tool timeout)
// and the run's wall-time limit, and ends with a cancel; it does not count against the CPU
// budget.

// TenantFunc returns the tenant of an agent (a session id), by which waiting programs are queued
// fairly; "" puts the agent's programs in one queue with every other agent of no tenant.
type TenantFunc func(agent string) string

// waitSlot waits for the first program slot of a run for tenant. It returns the ticket the run
// starts with, or the run's failure when the call ended (timed out, cancelled) first.
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

// lease is a run's program slot: tk is held while the run is in JavaScript, nil while it waits.
type lease struct {
	q      *fairq.Queue
	tenant string
	tk     *fairq.Ticket
}

// holdSlot makes sure the run holds a slot before it calls into JavaScript, waiting for one when
// it gave its slot back. It reports false when the run failed meanwhile (the failure is
// recorded: the call ended, or another limit).
func (s *session) holdSlot() bool {
	l := s.lease
	if l == nil || l.tk != nil {
		return true
	}
	tk := l.q.Enqueue(l.tenant)
	if err := tk.Wait(s.waitCtx); err != nil {
		if e := ended(s.ctx); e != nil {
			s.fail(e.kind, e.msg)
		}
		return false
	}
	l.tk = tk
	return true
}

// dropSlot gives the run's slot back, if it holds one.
func (s *session) dropSlot() {
	if l := s.lease; l != nil && l.tk != nil {
		l.tk.Release()
		l.tk = nil
	}
}
