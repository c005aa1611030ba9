package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/dshd/dshd/pkg/pgstore"
)

// TestPostReadsTheSessionWithItsHead: a message post does not read the session before it posts;
// the post's own transaction answers what that read did. A session without a preset answers 409
// no_preset and appends nothing, with or without a stream; another tenant's session and a deleted
// one answer 404, and so does the idempotent retry of a post to a session deleted since.
func TestPostReadsTheSessionWithItsHead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Sessions made over HTTP have a preset; one without (made by the store) is refused.
	bare, err := e.log.SessionCreate(context.Background(), e.tenantA, pgstore.SessionParams{})
	if err != nil {
		t.Fatal(err)
	}
	path := "/v1/sessions/" + bare.ID.String()
	e.do(t, "POST", path+"/messages", e.keyA, `{"content":"x"}`).wantProblem(t, http.StatusConflict, "no_preset")
	e.do(t, "POST", path+"/messages", e.keyA, `{"content":"x"}`, "Accept", "text/event-stream").
		wantProblem(t, http.StatusConflict, "no_preset")
	var after struct{ LastSeq int64 }
	e.do(t, "GET", path, e.keyA, nil).want(t, http.StatusOK).json(t, &after)
	if after.LastSeq != bare.LastSeq {
		t.Fatalf("refused posts appended: last seq %d, was %d", after.LastSeq, bare.LastSeq)
	}

	sid := e.sessionCreate(t, e.keyA)
	msgs := "/v1/sessions/" + sid.String() + "/messages"
	e.do(t, "POST", msgs, e.keyB, `{"content":"x"}`).wantProblem(t, http.StatusNotFound, "not_found")
	e.do(t, "POST", msgs, e.keyA, `{"content":"inject"}`, "Idempotency-Key", "k1").want(t, http.StatusAccepted)
	e.do(t, "DELETE", "/v1/sessions/"+sid.String(), e.keyA, nil).want(t, http.StatusNoContent)
	e.do(t, "POST", msgs, e.keyA, `{"content":"x"}`).wantProblem(t, http.StatusNotFound, "not_found")
	e.do(t, "POST", msgs, e.keyA, `{"content":"inject"}`, "Idempotency-Key", "k1").wantProblem(t, http.StatusNotFound, "not_found")
}

// TestPostsToAnotherTenantsSessionDrainNothing: the per-session post rate is the tenant's own.
// Another tenant naming the session's id, beyond the session's burst, gets 404 (or 429 from its
// own bucket for that id) and takes nothing from the session's rate: its owner's post is accepted.
func TestPostsToAnotherTenantsSessionDrainNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionCreate(t, e.keyA)
	msgs := "/v1/sessions/" + sid.String() + "/messages"
	limited := 0
	for range 40 {
		r := e.do(t, "POST", msgs, e.keyB, `{"content":"x","mode":"inject"}`)
		if r.status == http.StatusTooManyRequests {
			limited++
			continue
		}
		r.wantProblem(t, http.StatusNotFound, "not_found")
	}
	if limited == 0 {
		t.Fatalf("40 posts at once were never limited; the test needs a burst below 40")
	}
	e.do(t, "POST", msgs, e.keyA, `{"content":"x","mode":"inject"}`).want(t, http.StatusAccepted)
}
