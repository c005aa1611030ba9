package main

import (
	"strings"
	"testing"
)

// TestPolicyWebhookConfig: the policy webhook settings default to disabled, https only and
// public addresses only; a key shorter than 32 bytes is refused.
func TestPolicyWebhookConfig(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(func(string) string { return "" })
	if err != nil || c.PolicyWebhookKey != "" || c.PolicyWebhookHTTP || c.PolicyWebhookPrivate {
		t.Fatalf("defaults %+v, %v", c, err)
	}
	key := strings.Repeat("k", 32)
	env := map[string]string{"DSHD_POLICY_WEBHOOK_KEY": key, "DSHD_POLICY_WEBHOOK_ALLOW_HTTP": "1",
		"DSHD_POLICY_WEBHOOK_ALLOW_PRIVATE": "1"}
	c, err = ParseConfig(func(k string) string { return env[k] })
	if err != nil || c.PolicyWebhookKey != key || !c.PolicyWebhookHTTP || !c.PolicyWebhookPrivate {
		t.Fatalf("config %+v, %v", c, err)
	}
	for k, v := range map[string]string{"DSHD_POLICY_WEBHOOK_KEY": "short", "DSHD_POLICY_WEBHOOK_ALLOW_HTTP": "maybe",
		"DSHD_POLICY_WEBHOOK_ALLOW_PRIVATE": "2"} {
		if _, err := ParseConfig(func(name string) string { return map[string]string{k: v}[name] }); err == nil ||
			!strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: %v", k, v, err)
		}
	}
}
