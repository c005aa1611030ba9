package fairq

// The round robin, under Queue.mu. ring lists each tenant with waiting tickets once; next is
// where the next search for a tenant to serve starts, so that after a tenant is served every
// other tenant with waiters is offered a slot before it is again.

// dispatch hands free slots to waiting tickets: round robin over the tenants that wait and are
// within their share, each tenant's tickets in FIFO order.
func (q *Queue) dispatch() {
	for q.inUse < q.limit {
		i, ok := q.pick()
		if !ok {
			return
		}
		tenant := q.ring[i]
		t := q.queues[tenant][0]
		q.queues[tenant] = q.queues[tenant][1:]
		q.next = i + 1
		if len(q.queues[tenant]) == 0 {
			q.drop(i)
		}
		t.granted = true
		q.inUse++
		q.held[tenant]++
		close(t.ready)
	}
}

// pick returns the index in ring of the first tenant from next on (wrapping around) that holds
// less than its share.
func (q *Queue) pick() (int, bool) {
	n := len(q.ring)
	for k := range n {
		i := (q.next + k) % n
		if q.held[q.ring[i]] < q.share {
			return i, true
		}
	}
	return 0, false
}

// remove takes a waiting ticket out of its tenant's FIFO.
func (q *Queue) remove(t *Ticket) {
	fifo := q.queues[t.tenant]
	for i, w := range fifo {
		if w == t {
			q.queues[t.tenant] = append(fifo[:i:i], fifo[i+1:]...)
			break
		}
	}
	if len(q.queues[t.tenant]) > 0 {
		return
	}
	for i, tenant := range q.ring {
		if tenant == t.tenant {
			q.drop(i)
			return
		}
	}
}

// drop takes the tenant at index i out of ring (its FIFO is empty), keeping next on the tenant
// that was to be served next.
func (q *Queue) drop(i int) {
	delete(q.queues, q.ring[i])
	q.ring = append(q.ring[:i:i], q.ring[i+1:]...)
	if q.next > i {
		q.next--
	}
	if q.next >= len(q.ring) {
		q.next = 0
	}
}
