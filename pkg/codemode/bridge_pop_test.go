package codemode

import "testing"

// TestPopAfterCloseAbandonedTheQueue: the lane peeks a queued call, then the program settles and
// close abandons the queue before the lane pops it. The pop reports the call gone (it never
// starts) instead of cutting an empty queue; this raced under the hostile programs, which
// settle while calls are still being submitted.
func TestPopAfterCloseAbandonedTheQueue(t *testing.T) {
	a, b := &subCall{id: 1}, &subCall{id: 2}
	br := &bridge{queue: []*subCall{a, b}}
	if got := br.peek(); got != a {
		t.Fatalf("peek = %v, want the first call", got)
	}
	br.queue = nil // what close does between the lane's peek and pop
	if br.pop(a) {
		t.Fatal("pop took a call from an abandoned queue")
	}
	br.queue = []*subCall{b}
	if br.pop(a) {
		t.Fatal("pop took a call that is not at the head")
	}
	if !br.pop(b) || len(br.queue) != 0 {
		t.Fatalf("pop of the head call: queue %v", br.queue)
	}
}
