package pgstore

import (
	"testing"

	"github.com/google/uuid"
)

// TestHubObserveVouchesOnlyWhatItMay: an observed commit makes Latest vouch for it only while the
// session has a subscriber and the hub has not stopped vouching since the observer took its
// generation (a reconnect or heartbeat, a delete's notification); a lower seq never lowers what
// a notification said, and a notified seq 0 is recorded.
func TestHubObserveVouchesOnlyWhatItMay(t *testing.T) {
	h, err := NewHubFromURL("postgres://localhost/x", HubConfig{})
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.New()
	h.Observe(id, 5, h.Gen())
	if _, ok := h.Latest(id); ok {
		t.Fatal("an observation without a subscriber was kept")
	}
	_, unsub := h.Subscribe(id)
	defer unsub()
	h.wake(id, 0)
	if seq, ok := h.Latest(id); !ok || seq != 0 {
		t.Fatalf("after a notification of seq 0: %d, %v", seq, ok)
	}
	gen := h.Gen()
	h.Observe(id, 7, gen)
	if seq, ok := h.Latest(id); !ok || seq != 7 {
		t.Fatalf("after an observation of 7: %d, %v", seq, ok)
	}
	h.wake(id, 9)
	h.Observe(id, 8, gen)
	if seq, _ := h.Latest(id); seq != 9 {
		t.Fatalf("an older observation lowered the latest to %d", seq)
	}
	stale := h.Gen()
	h.wakeAll() // a reconnect: notifications may have been lost
	h.Observe(id, 12, stale)
	if _, ok := h.Latest(id); ok {
		t.Fatal("an observation of the generation before a reconnect was kept")
	}
	stale = h.Gen()
	h.wake(id, -1) // a delete
	h.Observe(id, 13, stale)
	if _, ok := h.Latest(id); ok {
		t.Fatal("an observation made before a delete's notification was kept")
	}
}
