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
	oldAdmin, olderAdmin := "old-admin-"+strings.Repeat("a", 22), "older-admin-"+strings.Repeat("b", 20)
	env := map[string]string{
		"DSHD_ADMIN_TOKEN": "new-admin", "DSHD_ADMIN_TOKEN_PREVIOUS": oldAdmin + ", " + olderAdmin,
		"DSHD_STREAM_TOKEN_SECRET": newSecret, "DSHD_STREAM_TOKEN_SECRET_PREVIOUS": oldSecret,
	}
	c, err := ParseConfig(func(k string) string { return env[k] })
	if err != nil || c.AdminToken != "new-admin" || strings.Join(c.AdminTokenPrevious, "|") != oldAdmin+"|"+olderAdmin ||
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

// TestAdminTokenPreviousNeedsThirtyTwoBytes (review of issue 17, finding 12): a former admin token
// had no minimum length, unlike a former stream-token secret. Each DSHD_ADMIN_TOKEN_PREVIOUS entry
// must now be at least 32 bytes (the error names the entry by position, never its value); the
// current token keeps no minimum, so `make run`'s dev-admin-token still starts a server.
func TestAdminTokenPreviousNeedsThirtyTwoBytes(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("p", 32)
	env := map[string]string{"DSHD_ADMIN_TOKEN": "dev-admin-token", "DSHD_ADMIN_TOKEN_PREVIOUS": long + ",short-admin-token"}
	_, err := ParseConfig(func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), "DSHD_ADMIN_TOKEN_PREVIOUS: entry 2") ||
		strings.Contains(err.Error(), "short-admin-token") || strings.Contains(err.Error(), long) {
		t.Fatalf("a 17-byte former admin token: %v", err)
	}
	env["DSHD_ADMIN_TOKEN_PREVIOUS"] = long
	if c, err := ParseConfig(func(k string) string { return env[k] }); err != nil || c.AdminToken != "dev-admin-token" {
		t.Fatalf("the dev admin token with a 32-byte former one: %+v, %v", c, err)
	}
	delete(env, "DSHD_ADMIN_TOKEN_PREVIOUS")
	if _, err := ParseConfig(func(k string) string { return env[k] }); err != nil {
		t.Fatalf("make run's dev admin token alone: %v", err)
	}
}
