package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/webhook"
)

// TestSignMatchesTheConvention: the signature is v1, and the base64 HMAC-SHA256 of
// "<id>.<timestamp>.<body>" under the secret's decoded bytes, computed here independently.
func TestSignMatchesTheConvention(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef0123456789abcdef")
	at := time.Unix(1_700_000_000, 0)
	body := []byte(`{"id":"e1","type":"turn.completed"}`)
	m := hmac.New(sha256.New, key)
	m.Write([]byte("msg_1.1700000000." + string(body)))
	want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	if got := webhook.Sign(key, "msg_1", at, body); got != want {
		t.Fatalf("Sign = %q, want %q", got, want)
	}
	secret := webhook.FormatSecret(key)
	if !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("secret %q", secret)
	}
	if back, err := webhook.ParseSecret(secret); err != nil || string(back) != string(key) {
		t.Fatalf("ParseSecret: %q %v", back, err)
	}
	if a, b := webhook.NewSecret(), webhook.NewSecret(); len(a) != webhook.SecretBytes || string(a) == string(b) {
		t.Fatalf("NewSecret: %x %x", a, b)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	key := webhook.NewSecret()
	secret := webhook.FormatSecret(key)
	at := time.Unix(1_700_000_000, 0)
	body := []byte(`{"a":1}`)
	headers := func(id string, ts time.Time, sig string) http.Header {
		h := http.Header{}
		h.Set(webhook.HeaderID, id)
		h.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
		h.Set(webhook.HeaderSignature, sig)
		return h
	}
	good := webhook.Sign(key, "e1", at, body)
	if err := webhook.Verify(secret, headers("e1", at, good), body, at.Add(time.Minute), webhook.DefaultTolerance); err != nil {
		t.Fatal(err)
	}
	// Several signatures (a rotation): one that matches is enough.
	other := webhook.Sign(webhook.NewSecret(), "e1", at, body)
	if err := webhook.Verify(secret, headers("e1", at, other+" "+good), body, at, webhook.DefaultTolerance); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		h    http.Header
		body string
		now  time.Time
		want error
	}{
		"other body":      {headers("e1", at, good), `{"a":2}`, at, webhook.ErrSignature},
		"other id":        {headers("e2", at, good), `{"a":1}`, at, webhook.ErrSignature},
		"other secret":    {headers("e1", at, other), `{"a":1}`, at, webhook.ErrSignature},
		"replayed late":   {headers("e1", at, good), `{"a":1}`, at.Add(6 * time.Minute), webhook.ErrTimestamp},
		"from the future": {headers("e1", at, good), `{"a":1}`, at.Add(-6 * time.Minute), webhook.ErrTimestamp},
		"other version":   {headers("e1", at, "v2,"+strings.TrimPrefix(good, "v1,")), `{"a":1}`, at, webhook.ErrSignature},
		"no headers":      {http.Header{}, `{"a":1}`, at, webhook.ErrMissingHeaders},
	} {
		if err := webhook.Verify(secret, tc.h, []byte(tc.body), tc.now, webhook.DefaultTolerance); err != tc.want {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

// TestScheduleDoublesWithJitterAndEnds: the wait after attempt n lies in the upper half of
// Base·2^(n-1), at most Max; after the last attempt there is none.
func TestScheduleDoublesWithJitterAndEnds(t *testing.T) {
	t.Parallel()
	s := webhook.Schedule{Base: time.Second, Max: 10 * time.Second, Attempts: 6}
	for n, full := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second} {
		for range 50 {
			d, ok := s.Next(n)
			if !ok || d < full/2 || d > full {
				t.Fatalf("Next(%d) = %v %v, want within [%v, %v]", n, d, ok, full/2, full)
			}
		}
	}
	if _, ok := s.Next(6); ok {
		t.Fatal("a wait after the last attempt")
	}
}

type receiver struct {
	mu   sync.Mutex
	reqs []*http.Request
	body [][]byte
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.reqs, rc.body = append(rc.reqs, r), append(rc.body, b)
	rc.mu.Unlock()
	switch r.URL.Path {
	case "/fail":
		w.WriteHeader(http.StatusServiceUnavailable)
	case "/redirect":
		http.Redirect(w, r, "http://127.0.0.1:1/elsewhere", http.StatusFound)
	case "/slow":
		time.Sleep(300 * time.Millisecond)
	}
}

// TestSenderSignsAndReportsOutcomes: a 2xx answer succeeds with the signed body; a 5xx, a
// redirect (not followed) and a timeout fail with a short error that repeats no URL; a private
// address is refused when dialling unless allowed.
func TestSenderSignsAndReportsOutcomes(t *testing.T) {
	t.Parallel()
	rc := &receiver{}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	key := webhook.NewSecret()
	s := webhook.NewSender(webhook.SenderConfig{AllowHTTP: true, AllowPrivate: true, Timeout: 100 * time.Millisecond})
	body := []byte(`{"id":"e1"}`)
	ctx := context.Background()
	if r := s.Send(ctx, srv.URL+"/ok?token=abc", key, "e1", body); !r.OK() || r.Status != 200 {
		t.Fatalf("ok: %+v", r)
	}
	rc.mu.Lock()
	got := rc.reqs[0]
	if err := webhook.Verify(webhook.FormatSecret(key), got.Header, rc.body[0], time.Now(), webhook.DefaultTolerance); err != nil ||
		string(rc.body[0]) != string(body) || got.Header.Get("Content-Type") != "application/json" || got.Header.Get(webhook.HeaderID) != "e1" {
		t.Fatalf("delivered %s with %v: %v", rc.body[0], got.Header, err)
	}
	rc.mu.Unlock()
	for path, want := range map[string]string{
		"/fail":     "the endpoint answered HTTP 503",
		"/redirect": "the endpoint answered HTTP 302 (redirects are not followed)",
		"/slow":     "the endpoint did not answer within 100ms",
	} {
		r := s.Send(ctx, srv.URL+path+"?token=secret-token", key, "e1", body)
		if r.OK() || r.Err != want || strings.Contains(r.Err, "secret-token") {
			t.Errorf("%s: %+v, want %q", path, r, want)
		}
	}
	rc.mu.Lock()
	if n := len(rc.reqs); n != 4 {
		t.Errorf("%d requests, want 4 (the redirect not followed)", n)
	}
	rc.mu.Unlock()

	guarded := webhook.NewSender(webhook.SenderConfig{AllowHTTP: true})
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	if r := guarded.Send(ctx, "http://localhost:"+port+"/ok", key, "e1", body); r.OK() || !strings.Contains(r.Err, "loopback name") {
		t.Errorf("localhost: %+v", r)
	}
	if r := guarded.Send(ctx, srv.URL+"/ok", key, "e1", body); r.OK() || !strings.Contains(r.Err, "not a public address") {
		t.Errorf("127.0.0.1: %+v", r)
	}
	if r := webhook.NewSender(webhook.SenderConfig{}).Send(ctx, srv.URL+"/ok", key, "e1", body); r.OK() || !strings.Contains(r.Err, "allows no http") {
		t.Errorf("http: %+v", r)
	}
}
