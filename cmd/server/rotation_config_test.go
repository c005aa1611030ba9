package main

import (
	"strings"
	"testing"
)

// TestRotationConfig (issue 17, finding 1: the exposed admin token and stream-token secret are
// rotated with an overlap): DSHD_ADMIN_TOKEN_PREVIOUS and DSHD_STREAM_TOKEN_SECRET_PREVIOUS are
// comma-separated lists of former values, read beside the current one; each needs the current
// value set, a short former secret is refused, and no error quotes a value.
func TestRotationConfig(t *testing.T) {
	t.Parallel()
	oldSecret, newSecret := strings.Repeat("o", 32), strings.Repeat("n", 32)
	env := map[string]string{
		"DSHD_ADMIN_TOKEN": "new-admin", "DSHD_ADMIN_TOKEN_PREVIOUS": "old-admin, older-admin",
		"DSHD_STREAM_TOKEN_SECRET": newSecret, "DSHD_STREAM_TOKEN_SECRET_PREVIOUS": oldSecret,
	}
	c, err := ParseConfig(func(k string) string { return env[k] })
	if err != nil || c.AdminToken != "new-admin" || strings.Join(c.AdminTokenPrevious, "|") != "old-admin|older-admin" ||
		c.StreamTokenSecret != newSecret || strings.Join(c.StreamTokenSecretPrevious, "|") != oldSecret {
		t.Fatalf("config %+v, %v", c, err)
	}
	for name, bad := range map[string]map[string]string{
		"admin without current":  {"DSHD_ADMIN_TOKEN_PREVIOUS": "old-admin"},
		"secret without current": {"DSHD_STREAM_TOKEN_SECRET_PREVIOUS": oldSecret},
		"short former secret":    {"DSHD_STREAM_TOKEN_SECRET": newSecret, "DSHD_STREAM_TOKEN_SECRET_PREVIOUS": oldSecret + ",short-secret"},
	} {
		_, err := ParseConfig(func(k string) string { return bad[k] })
		if err == nil || !strings.Contains(err.Error(), "_PREVIOUS") || strings.Contains(err.Error(), "old-admin") ||
			strings.Contains(err.Error(), "short-secret") || strings.Contains(err.Error(), oldSecret) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
