package api_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/worker"
)

// TestRateLimitedPostAnswers429 (issue 9, finding 7): posts to one session beyond its rate
// answer 429 rate_limited with Retry-After, as openapi.yaml documents.
func TestRateLimitedPostAnswers429(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := loadContract(t)
	sid := e.sessionOfPreset(t, e.keyA, minimalPreset)
	path := "/v1/sessions/" + sid + "/messages"
	for i := 0; ; i++ {
		r := e.do(t, "POST", path, e.keyA, `{"content":"x","mode":"inject"}`)
		if r.status == 202 {
			if i > 200 {
				t.Fatal("200 posts to one session in a row were accepted")
			}
			continue
		}
		c.check("POST", "/v1/sessions/{id}/messages", r)
		r.wantProblem(t, 429, "rate_limited")
		if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 {
			t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
		}
		return
	}
}

// TestFullInboxAnswers429 (issue 9, finding 2): a post beyond the session's inbox bound
// answers 429 inbox_full, as openapi.yaml documents.
func TestFullInboxAnswers429(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) {
		tools, err := agents.BuiltinTools(true)
		if err != nil {
			t.Fatal(err)
		}
		ag, err := agents.New(agents.Config{Tools: tools})
		if err != nil {
			t.Fatal(err)
		}
		hub, ok := c.Hub.(*pgstore.Hub)
		if !ok {
			t.Fatalf("hub %T", c.Hub)
		}
		wk, err := worker.New(worker.Config{Store: c.Log, Hub: hub, Presets: c.Presets, Agents: ag, InboxMaxMessages: 2})
		if err != nil {
			t.Fatal(err)
		}
		if err := wk.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = wk.Stop(ctx)
		})
		c.Turns = wk
	})
	c := loadContract(t)
	sid := e.sessionOfPreset(t, e.keyA, minimalPreset)
	path := "/v1/sessions/" + sid + "/messages"
	for range 2 {
		e.do(t, "POST", path, e.keyA, `{"content":"x","mode":"inject"}`).want(t, 202)
	}
	r := c.check("POST", "/v1/sessions/{id}/messages", e.do(t, "POST", path, e.keyA, `{"content":"x","mode":"inject"}`))
	if p := r.wantProblem(t, 429, "inbox_full"); !strings.Contains(p.Detail, "inbox") {
		t.Fatalf("detail %q", p.Detail)
	}
}
