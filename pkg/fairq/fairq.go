// Package fairq is a counting semaphore shared fairly by tenants: a Queue has a number of slots
// for the whole process and, optionally, a share no one tenant may hold more of; waiters queue
// one FIFO per tenant, and a freed slot goes to the tenants with waiters in round-robin order, so
// a tenant that queues many waits its turn beside a tenant that queues one. Code mode bounds its
// concurrent programs with one, the bash tool its concurrent commands.
//
// A waiter is its caller's goroutine blocked in Ticket.Wait: the queue starts no goroutine and
// keeps no timer. It imports only the standard library.
package fairq

import (
	"context"
	"errors"
	"sync"
)

// Queue is a fair semaphore. Its methods are safe for concurrent use; the zero value is not
// usable (New).
type Queue struct {
	limit, share int

	mu     sync.Mutex
	inUse  int
	held   map[string]int       // slots held, by tenant (entries > 0 only)
	queues map[string][]*Ticket // waiting tickets, by tenant, FIFO (entries non-empty only)
	ring   []string             // the tenants with waiting tickets, in round-robin order
	next   int                  // the index in ring of the tenant served next
}

// New returns a Queue of limit slots, of which one tenant holds at most share at a time (share
// 0 or more than limit: limit). limit must be positive.
func New(limit, share int) (*Queue, error) {
	if limit < 1 {
		return nil, errors.New("fairq: the limit must be at least 1")
	}
	if share < 0 {
		return nil, errors.New("fairq: the share must not be negative")
	}
	if share == 0 || share > limit {
		share = limit
	}
	return &Queue{limit: limit, share: share, held: map[string]int{}, queues: map[string][]*Ticket{}}, nil
}

// Limit returns the number of slots; Share the most one tenant holds at a time.
func (q *Queue) Limit() int { return q.limit }

// Share returns the most slots one tenant holds at a time.
func (q *Queue) Share() int { return q.share }

// Ticket is one place in the queue: waiting, then holding a slot until Release.
type Ticket struct {
	q      *Queue
	tenant string
	ready  chan struct{} // closed when the ticket gets its slot
	// under q.mu:
	granted, done bool
}

// Enqueue takes a place for tenant at the end of its FIFO and returns at once: the ticket holds
// a slot when Ready is closed (at once when a slot is free and the tenant is within its share
// and no one waits before it). The caller must end the ticket with Release, or with a Wait that
// returns an error.
func (q *Queue) Enqueue(tenant string) *Ticket {
	t := &Ticket{q: q, tenant: tenant, ready: make(chan struct{})}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queues[tenant]) == 0 {
		q.ring = append(q.ring, tenant)
	}
	q.queues[tenant] = append(q.queues[tenant], t)
	q.dispatch()
	return t
}

// Acquire waits for a slot for tenant: Enqueue, then Wait. It returns the ticket to Release, or
// the context's error (holding nothing) when ctx ends first.
func (q *Queue) Acquire(ctx context.Context, tenant string) (*Ticket, error) {
	t := q.Enqueue(tenant)
	if err := t.Wait(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// Ready is closed when the ticket holds its slot.
func (t *Ticket) Ready() <-chan struct{} { return t.ready }

// Wait blocks until the ticket holds its slot (nil) or ctx ends: then the ticket leaves the
// queue, or gives back the slot it got meanwhile, and Wait returns ctx's error.
func (t *Ticket) Wait(ctx context.Context) error {
	select {
	case <-t.ready:
		return nil
	default:
	}
	select {
	case <-t.ready:
		return nil
	case <-ctx.Done():
		t.Release()
		return ctx.Err()
	}
}

// Release gives back the ticket's slot to the next waiter, or leaves the queue when the ticket
// is still waiting. A second Release does nothing.
func (t *Ticket) Release() {
	q := t.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.done {
		return
	}
	t.done = true
	if !t.granted {
		q.remove(t)
		return
	}
	q.inUse--
	if q.held[t.tenant]--; q.held[t.tenant] == 0 {
		delete(q.held, t.tenant)
	}
	q.dispatch()
}
