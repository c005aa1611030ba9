package openai

import (
	"strings"
	"testing"
)

// TestProviderMessageKeysMasked: a provider error that echoes the key it was sent carries no key
// into the error (and so into the turn's events, the API and the logs).
func TestProviderMessageKeysMasked(t *testing.T) {
	for _, body := range []string{
		`{"error":{"message":"Incorrect API key provided: sk-live0123456789abcdef. Check it.","type":"invalid_request_error"}}`,
		`{"error":"Authentication Fails, Your api key: Bearer abcdef0123456789xyz is invalid"}`,
	} {
		e := statusError(401, []byte(body))
		for _, secret := range []string{"sk-live0123456789abcdef", "abcdef0123456789xyz"} {
			if strings.Contains(e.Error(), secret) || strings.Contains(e.Message, secret) {
				t.Errorf("the error %q carries the key %q", e.Error(), secret)
			}
		}
		if !strings.Contains(e.Message, "***") {
			t.Errorf("message %q: want the key masked with ***", e.Message)
		}
	}
}
