package fairq_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dshd/dshd/pkg/fairq"
)

func newQueue(t *testing.T, limit, share int) *fairq.Queue {
	t.Helper()
	q, err := fairq.New(limit, share)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func ready(t *fairq.Ticket) bool {
	select {
	case <-t.Ready():
		return true
	default:
		return false
	}
}

// served returns the index of the one ticket of ts that is ready and was not before (in seen),
// failing unless there is exactly one.
func served(t *testing.T, ts []*fairq.Ticket, seen map[*fairq.Ticket]bool) int {
	t.Helper()
	got := -1
	for i, tk := range ts {
		if ready(tk) && !seen[tk] {
			if got >= 0 {
				t.Fatalf("tickets %d and %d both got the one freed slot", got, i)
			}
			got = i
		}
	}
	if got < 0 {
		t.Fatal("no ticket got the freed slot")
	}
	seen[ts[got]] = true
	return got
}

// TestFairQueueServesEachTenantInTurn: with one slot taken, tenant A queues 10 programs and then
// tenant B queues 1 (issue 17, finding 4: one tenant's programs must not hold back another's).
// B is served second, right after A's first, not eleventh; A's own are served in their order.
func TestFairQueueServesEachTenantInTurn(t *testing.T) {
	t.Parallel()
	q := newQueue(t, 1, 0)
	holder := q.Enqueue("other")
	if !ready(holder) {
		t.Fatal("the first ticket did not get the free slot")
	}
	var ts []*fairq.Ticket
	for range 10 {
		ts = append(ts, q.Enqueue("A"))
	}
	ts = append(ts, q.Enqueue("B"))
	seen := map[*fairq.Ticket]bool{}
	var order []int
	prev := holder
	for range ts {
		prev.Release()
		i := served(t, ts, seen)
		order = append(order, i)
		prev = ts[i]
	}
	want := []int{0, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("service order %v, want %v (B is ticket 10)", order, want)
		}
	}
}

// TestFairQueueShareBoundsOneTenant: a tenant holds at most its share of the slots, even while
// others are free; another tenant gets one of those at once.
func TestFairQueueShareBoundsOneTenant(t *testing.T) {
	t.Parallel()
	q := newQueue(t, 3, 2)
	a := []*fairq.Ticket{q.Enqueue("A"), q.Enqueue("A"), q.Enqueue("A")}
	if !ready(a[0]) || !ready(a[1]) || ready(a[2]) {
		t.Fatalf("A's tickets ready: %v %v %v, want the first two only", ready(a[0]), ready(a[1]), ready(a[2]))
	}
	b := q.Enqueue("B")
	if !ready(b) {
		t.Fatal("B did not get the slot A may not take")
	}
	b.Release()
	if ready(a[2]) {
		t.Fatal("A's third ticket got a slot past A's share")
	}
	a[0].Release()
	if !ready(a[2]) {
		t.Fatal("A's third ticket did not get the slot A gave back")
	}
}

// TestFairQueueCancelWhileQueued: a waiter whose context ends leaves the queue with the
// context's error and holds nothing; the freed slot goes to the next waiter, and a later Release
// of the cancelled ticket changes nothing.
func TestFairQueueCancelWhileQueued(t *testing.T) {
	t.Parallel()
	q := newQueue(t, 1, 0)
	holder := q.Enqueue("A")
	waiting := q.Enqueue("A")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- waiting.Wait(ctx) }()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
	next := q.Enqueue("B")
	holder.Release()
	if ready(waiting) || !ready(next) {
		t.Fatalf("after the holder's release: cancelled ticket ready %v, next ready %v", ready(waiting), ready(next))
	}
	waiting.Release()
	other := q.Enqueue("C")
	if ready(other) {
		t.Fatal("the cancelled ticket's Release freed a slot it never held")
	}
	next.Release()
	if !ready(other) {
		t.Fatal("the slot did not pass on")
	}
}

// TestFairQueueWaitWakesOnRelease: a waiter blocked in Acquire gets the slot when the holder
// releases it; a context ended before Acquire with no free slot fails at once.
func TestFairQueueWaitWakesOnRelease(t *testing.T) {
	t.Parallel()
	q := newQueue(t, 1, 0)
	holder, err := q.Acquire(context.Background(), "A")
	if err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := q.Acquire(done, "B"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with an ended context and no free slot = %v", err)
	}
	tk := q.Enqueue("B")
	errc := make(chan error, 1)
	go func() { errc <- tk.Wait(context.Background()) }()
	holder.Release()
	if err := <-errc; err != nil {
		t.Fatalf("Wait = %v", err)
	}
	tk.Release()
}

// TestFairQueueNeverExceedsTheLimit: many goroutines of several tenants acquire and release;
// never more than the limit hold a slot, nor more than the share of one tenant.
func TestFairQueueNeverExceedsTheLimit(t *testing.T) {
	t.Parallel()
	const limit, share = 3, 2
	q := newQueue(t, limit, share)
	var inUse atomic.Int32
	var perTenant [4]atomic.Int32
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			tenant := g % 4
			for range 200 {
				tk, err := q.Acquire(context.Background(), string(rune('A'+tenant)))
				if err != nil {
					t.Error(err)
					return
				}
				if n := inUse.Add(1); n > limit {
					t.Errorf("%d slots held, limit %d", n, limit)
				}
				if n := perTenant[tenant].Add(1); n > share {
					t.Errorf("tenant %d holds %d slots, share %d", tenant, n, share)
				}
				perTenant[tenant].Add(-1)
				inUse.Add(-1)
				tk.Release()
			}
		})
	}
	wg.Wait()
}

// TestFairQueueRefusesABadSize: New refuses a limit below 1 and a negative share.
func TestFairQueueRefusesABadSize(t *testing.T) {
	t.Parallel()
	if _, err := fairq.New(0, 0); err == nil {
		t.Fatal("New(0, 0) succeeded")
	}
	if _, err := fairq.New(1, -1); err == nil {
		t.Fatal("New(1, -1) succeeded")
	}
	if q, _ := fairq.New(2, 5); q.Share() != 2 {
		t.Fatalf("share %d, want the limit 2", q.Share())
	}
}
