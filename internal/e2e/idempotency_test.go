package e2e

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
)

// TestIdempotencyKeyRetry: a POST retried with the same Idempotency-Key, concurrently and then
// again, on each of two replicas, answers the original {messageId, seq} and creates no second
// message and no second turn; the same key with another body answers 409 on either replica.
func TestIdempotencyKeyRetry(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, 10*time.Second)
	sid, key := c.sessionCreate(t), "retry-"+uuid.NewString()
	const retries = 3 // per replica, at once
	answers := make([]posted, 2*retries)
	errs := make([]error, len(answers))
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			answers[i], errs[i] = c.replicas[i%2].postMessage(t.Context(), c.key, sid, "tool:echo", "followup", "Idempotency-Key", key)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	first := answers[0]
	for i, a := range answers {
		if a != first {
			t.Fatalf("post %d answered %+v, post 0 %+v", i, a, first)
		}
	}
	for _, r := range c.replicas {
		again, err := r.postMessage(t.Context(), c.key, sid, "tool:echo", "followup", "Idempotency-Key", key)
		if err != nil || again != first {
			t.Fatalf("retry on %s answered %+v, %v; want %+v", r.name, again, err, first)
		}
		rp := r.call(t.Context(), "POST", "/v1/sessions/"+sid+"/messages", c.key,
			map[string]string{"content": "other"}, "Idempotency-Key", key)
		if err := rp.decode(http.StatusConflict, nil); err != nil {
			t.Fatalf("the key with another body on %s: %v", r.name, err)
		}
	}

	// A message with a new key: once it is served, a duplicate of the first (which would have
	// been queued before it) would have been served too.
	last, err := c.replicas[1].postMessage(t.Context(), c.key, sid, "text", "followup", "Idempotency-Key", key+"-next")
	if err != nil {
		t.Fatal(err)
	}
	evs := c.replicas[0].waitEvents(t, c.key, sid, 30*time.Second, func(evs []storedEvent) bool {
		_, open := eventlog.OpenTurn(plain(evs))
		return servedIDs(evs)[last.MessageID] == 1 && !open
	})
	if ids := servedIDs(evs); ids[first.MessageID] != 1 || len(ids) != 2 {
		t.Errorf("messages served %v, want %s and %s once each", ids, first.MessageID, last.MessageID)
	}
	if n := count(evs, eventlog.TypeTurnStart); n != 2 {
		t.Errorf("%d turns, want 2\n%s", n, describe(evs))
	}
	inserted := 0
	for _, ev := range evs {
		if ev.Type == eventlog.TypeInboxSpliced {
			var d struct{ Inserted []json.RawMessage }
			_ = json.Unmarshal(ev.Data, &d)
			inserted += len(d.Inserted)
		}
	}
	if inserted != 2 {
		t.Errorf("%d messages posted to the inbox, want 2\n%s", inserted, describe(evs))
	}
	if err := checkLog(evs); err != nil {
		t.Errorf("%v\n%s", err, describe(evs))
	}
}
