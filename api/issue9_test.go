package api_test

import (
	"strconv"
	"testing"
)

// TestI9F7_RateLimitedPostAnswers429 (issue 9, finding 7): posts to one session beyond its rate
// answer 429 rate_limited with Retry-After, as openapi.yaml documents.
func TestI9F7_RateLimitedPostAnswers429(t *testing.T) {
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
