package openai

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/llm"
)

// TestProviderMessageKeysMasked: a provider error that echoes the key it was sent carries no key
// into the error (and so into the turn's events, the API and the logs).
func TestProviderMessageKeysMasked(t *testing.T) {
	for _, body := range []string{
		`{"error":{"message":"Incorrect API key provided: sk-live0123456789abcdef. Check it.","type":"invalid_request_error"}}`,
		`{"error":"Authentication Fails, Your api key: Bearer abcdef0123456789xyz is invalid"}`,
		`{"error":"upstream refused eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0In0.c2lnbmF0dXJl"}`,
	} {
		e := statusError(401, []byte(body))
		for _, secret := range []string{"sk-live0123456789abcdef", "abcdef0123456789xyz", "hbGciOiJIUzI1NiJ9", "c2lnbmF0dXJl"} {
			if strings.Contains(e.Error(), secret) || strings.Contains(e.Message, secret) {
				t.Errorf("the error %q carries the key %q", e.Error(), secret)
			}
		}
		if !strings.Contains(e.Message, "***") {
			t.Errorf("message %q: want the key masked with ***", e.Message)
		}
	}
}

// TestClientMasksItsOwnKey: a key that does not look like one (a tenant's key for a proxy, say)
// is masked too when the provider echoes it, before a status, inside a 200 stream, and in the
// client's log lines.
func TestClientMasksItsOwnKey(t *testing.T) {
	const key = "tenant-key-Zq81.opaque"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if r.URL.Query().Has("stream") || strings.Contains(r.Header.Get("X-Test"), "stream") {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"error\":{\"message\":\"key %s was refused mid-stream\"}}\n\n", got)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"key %s is invalid","type":"authentication_error"}}`, got)
	}))
	defer srv.Close()
	var logs bytes.Buffer
	c := New(Config{BaseURL: srv.URL, APIKey: key, MaxAttempts: 1,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	_, err := c.Stream(context.Background(), llm.Request{Messages: []llm.Message{llm.NewUserMessage("m1", "hi")}})
	if err == nil || strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "***") {
		t.Fatalf("status error %v: want the key masked", err)
	}
	streaming := New(Config{BaseURL: srv.URL, APIKey: key, MaxAttempts: 1,
		HTTPClient: &http.Client{Transport: headerTransport{"X-Test", "stream"}}})
	s, err := streaming.Stream(context.Background(), llm.Request{Messages: []llm.Message{llm.NewUserMessage("m1", "hi")}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var recvErr error
	for recvErr == nil {
		_, recvErr = s.Recv()
	}
	if strings.Contains(recvErr.Error(), key) || !strings.Contains(recvErr.Error(), "***") {
		t.Fatalf("stream error %v: want the key masked", recvErr)
	}
	if strings.Contains(logs.String(), key) {
		t.Fatalf("the log shows the key: %s", logs.String())
	}
}

// headerTransport adds one header to every request.
type headerTransport struct{ name, value string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.name, h.value)
	return http.DefaultTransport.RoundTrip(r)
}

// TestLongEchoedKeyLeavesNoPart: a key longer than the kept message (a proxy's JWT of 400
// bytes), or a short one that a long message pushes across the clip, leaves no part of itself
// (no 8 bytes of it) in the error, whether the provider answers with a status or inside a 200
// stream; neither does an unknown token the client did not send.
func TestLongEchoedKeyLeavesNoPart(t *testing.T) {
	long := "eyJhbGciOiJIUzI1NiJ9." + strings.Repeat("Zm9vYmFy", 47) + ".sig-tail"
	if len(long) < 400 {
		t.Fatalf("test key of %d bytes", len(long))
	}
	short := "opaque-key-0123456789"
	for _, tc := range []struct{ key, prefix string }{
		{long, "Invalid token "},
		{long, ""},
		{short, strings.Repeat("padding ", 35) + "token="},
		{short, strings.Repeat("x", 290) + " "},
		{short, strings.Repeat("y", 285) + " token:"},
	} {
		echo := func(w http.ResponseWriter, r *http.Request) {
			got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error":{"message":%q}}`, tc.prefix+got+" was refused")
		}
		srv := httptest.NewServer(http.HandlerFunc(echo))
		c := New(Config{BaseURL: srv.URL, APIKey: tc.key, MaxAttempts: 1})
		_, err := c.Stream(context.Background(), llm.Request{Messages: []llm.Message{llm.NewUserMessage("m1", "hi")}})
		srv.Close()
		var le *llm.Error
		if !errors.As(err, &le) || le.Code != llm.CodeInvalidCredential {
			t.Fatalf("error %v: want INVALID_CREDENTIAL", err)
		}
		if part := keyPart(le.Message, tc.key); part != "" {
			t.Errorf("key of %d bytes after %d: the message %q keeps %q", len(tc.key), len(tc.prefix), le.Message, part)
		}
		// Without knowing the key (statusError alone), the clip still keeps no part of it.
		body := fmt.Sprintf(`{"error":{"message":%q}}`, tc.prefix+tc.key+" was refused")
		if e := statusError(401, []byte(body)); keyPart(e.Message, tc.key) != "" && !strings.Contains(e.Message, tc.key) {
			t.Errorf("statusError %q keeps a part of the key", e.Message)
		}
	}
	// A clipped prefix of the key at the end of a message is masked by maskKey too.
	e := maskKey(&llm.Error{Code: llm.CodeServer, Message: "refused: " + long[:40] + "..."}, long)
	if keyPart(e.Error(), long) != "" {
		t.Errorf("maskKey left %q", e.Error())
	}
}

// keyPart returns the first 8-byte piece of key found in msg, or "".
func keyPart(msg, key string) string {
	for i := 0; i+minKeyPrefix <= len(key); i++ {
		if strings.Contains(msg, key[i:i+minKeyPrefix]) {
			return key[i : i+minKeyPrefix]
		}
	}
	return ""
}
