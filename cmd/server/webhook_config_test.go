package main

import (
	"strings"
	"testing"
	"time"
)

// TestWebhookConfig: tenant webhooks default to https and public addresses only, with the
// documented schedule and bounds; each setting is read, and a bad value is refused naming it.
func TestWebhookConfig(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(func(string) string { return "" })
	want := WebhookSettings{MaxEndpoints: 20, Timeout: 10 * time.Second, Workers: 16, Poll: 250 * time.Millisecond,
		RetryBase: 5 * time.Second, RetryMax: time.Hour, MaxAttempts: 12, Retention: 168 * time.Hour}
	if err != nil || c.Webhooks != want {
		t.Fatalf("defaults %+v, %v; want %+v", c.Webhooks, err, want)
	}
	env := map[string]string{"DSHD_WEBHOOK_ALLOW_HTTP": "1", "DSHD_WEBHOOK_ALLOW_PRIVATE": "1", "DSHD_WEBHOOK_MAX_ENDPOINTS": "3",
		"DSHD_WEBHOOK_TIMEOUT": "2s", "DSHD_WEBHOOK_WORKERS": "4", "DSHD_WEBHOOK_POLL": "50ms", "DSHD_WEBHOOK_RETRY_BASE": "100ms",
		"DSHD_WEBHOOK_RETRY_MAX": "1s", "DSHD_WEBHOOK_MAX_ATTEMPTS": "5", "DSHD_WEBHOOK_RETENTION": "1h"}
	c, err = ParseConfig(func(k string) string { return env[k] })
	want = WebhookSettings{AllowHTTP: true, AllowPrivate: true, MaxEndpoints: 3, Timeout: 2 * time.Second, Workers: 4,
		Poll: 50 * time.Millisecond, RetryBase: 100 * time.Millisecond, RetryMax: time.Second, MaxAttempts: 5, Retention: time.Hour}
	if err != nil || c.Webhooks != want {
		t.Fatalf("config %+v, %v; want %+v", c.Webhooks, err, want)
	}
	for k, v := range map[string]string{"DSHD_WEBHOOK_ALLOW_HTTP": "maybe", "DSHD_WEBHOOK_ALLOW_PRIVATE": "2",
		"DSHD_WEBHOOK_MAX_ENDPOINTS": "0", "DSHD_WEBHOOK_WORKERS": "-1", "DSHD_WEBHOOK_MAX_ATTEMPTS": "x",
		"DSHD_WEBHOOK_TIMEOUT": "0s", "DSHD_WEBHOOK_POLL": "soon", "DSHD_WEBHOOK_RETRY_BASE": "-1s",
		"DSHD_WEBHOOK_RETRY_MAX": "1ms", "DSHD_WEBHOOK_RETENTION": "forever"} {
		if _, err := ParseConfig(func(name string) string { return map[string]string{k: v}[name] }); err == nil ||
			!strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: %v", k, v, err)
		}
	}
}
