package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/fault"
)

// TestTokenBucketsRefillAndPrune: a bucket refuses past its burst with the wait until the
// next token, refills at its rate, and is forgotten once full again; an unlimited rate never
// refuses.
func TestTokenBucketsRefillAndPrune(t *testing.T) {
	t.Parallel()
	l := newPostLimiter(Rate{PerSecond: 2, Burst: 2}, Rate{PerSecond: -1})
	tenant, sess := uuid.New(), uuid.New()
	now := time.Unix(1000, 0)
	for i := range 2 {
		if err := l.allow(tenant, sess, now); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	err := l.allow(tenant, sess, now)
	if fault.Code(err) != fault.RateLimited {
		t.Fatalf("third post: %v", err)
	}
	if ra, ok := err.(*fault.Error).Err.(fault.Wait); !ok || time.Duration(ra) != 500*time.Millisecond {
		t.Fatalf("wait %v, want 500ms", err.(*fault.Error).Err)
	}
	if err := l.allow(tenant, sess, now.Add(500*time.Millisecond)); err != nil {
		t.Fatalf("after a refill: %v", err)
	}
	l.prune(now.Add(600 * time.Millisecond))
	if len(l.session.m) != 1 || len(l.tenant.m) != 0 {
		t.Fatalf("buckets %d, %d: a bucket not yet full was pruned, or an unlimited one kept", len(l.session.m), len(l.tenant.m))
	}
	l.prune(now.Add(2 * time.Second))
	if len(l.session.m) != 0 {
		t.Fatal("a full bucket was kept")
	}
}

// TestPostTakesBothTokensOrNeither: a post the tenant's bucket refuses takes no token from the
// session's, so the session can post again as soon as the tenant can.
func TestPostTakesBothTokensOrNeither(t *testing.T) {
	t.Parallel()
	// The session's bucket refills so slowly that only its burst counts in this test.
	l := newPostLimiter(Rate{PerSecond: 0.0001, Burst: 2}, Rate{PerSecond: 1, Burst: 1})
	tenant, a, b := uuid.New(), uuid.New(), uuid.New()
	now := time.Unix(1000, 0)
	if err := l.allow(tenant, b, now); err != nil {
		t.Fatal(err)
	}
	// The tenant's one token is spent: a's post is refused by the tenant, not by a.
	err := l.allow(tenant, a, now)
	if fault.Code(err) != fault.RateLimited || !strings.Contains(fault.Message(err), "tenant") {
		t.Fatalf("second post: %v", err)
	}
	// Once the tenant holds a token again a posts twice: its burst of 2 is whole.
	for i := range 2 {
		now = now.Add(time.Second)
		if err := l.allow(tenant, a, now); err != nil {
			t.Fatalf("post %d of a: %v (the refused post took a's token)", i, err)
		}
	}
	now = now.Add(time.Second)
	if err := l.allow(tenant, a, now); fault.Code(err) != fault.RateLimited || !strings.Contains(fault.Message(err), "session") {
		t.Fatalf("third post of a: %v, want the session's refusal", err)
	}
}
