package openai_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/llm/openai"
)

// TestRedirectIsNotFollowed: the default client returns a 3xx as a non-retryable SERVER error
// and never sends the request (or the key) to the redirect target.
func TestRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	var reached atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		if r.Header.Get("Authorization") != "" {
			t.Errorf("the redirect target got the key %q", r.Header.Get("Authorization"))
		}
		w.WriteHeader(http.StatusTeapot)
	}))
	t.Cleanup(target.Close)
	for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		var asked atomic.Int32
		src := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			asked.Add(1)
			http.Redirect(w, r, target.URL+"/v1/chat/completions", status)
		}))
		rec := &recordSleep{}
		_, err := call(t, newClient(src.URL+"/v1", rec, nil), userRequest("text"))
		src.Close()
		var e *llm.Error
		if !errors.As(err, &e) || e.Code != llm.CodeServer || e.Status != status || e.Retryable {
			t.Fatalf("%d: err %#v, want a non-retryable SERVER error with the status", status, err)
		}
		if asked.Load() != 1 || len(rec.recorded()) != 0 {
			t.Fatalf("%d: %d requests, waits %v; want 1 request, no retry", status, asked.Load(), rec.recorded())
		}
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("the redirect target got %d requests", n)
	}
}

// TestCallerHTTPClientIsUsedAsIs: a caller-supplied client keeps its own redirect policy.
func TestCallerHTTPClientIsUsedAsIs(t *testing.T) {
	t.Parallel()
	_, base := startMock(t, mockllm.Config{})
	src := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, base+"/chat/completions", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(src.Close)
	c := newClient(src.URL+"/v1", &recordSleep{}, func(c *openai.Config) { c.HTTPClient = &http.Client{} })
	if _, err := call(t, c, userRequest("text")); err != nil {
		t.Fatalf("a following client failed: %v", err)
	}
}
