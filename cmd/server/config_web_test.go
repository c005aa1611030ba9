package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseConfigBrowserAccess(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(func(string) string { return "" })
	if err != nil || len(c.CORSOrigins) != 0 || c.StreamTokenSecret != "" || c.StreamTokenTTL != 5*time.Minute {
		t.Fatalf("defaults %v %v %v %v", c.CORSOrigins, c.StreamTokenSecret, c.StreamTokenTTL, err)
	}
	env := map[string]string{"DSHD_CORS_ORIGINS": "https://app.example, http://localhost:5173",
		"DSHD_STREAM_TOKEN_SECRET": strings.Repeat("k", 32), "DSHD_STREAM_TOKEN_TTL": "90s"}
	c, err = ParseConfig(func(k string) string { return env[k] })
	if err != nil || len(c.CORSOrigins) != 2 || c.CORSOrigins[1] != "http://localhost:5173" || c.StreamTokenTTL != 90*time.Second {
		t.Fatalf("parsed %v %v %v", c.CORSOrigins, c.StreamTokenTTL, err)
	}
	for k, v := range map[string]string{"DSHD_CORS_ORIGINS": "*", "DSHD_STREAM_TOKEN_SECRET": "short", "DSHD_STREAM_TOKEN_TTL": "2h"} {
		if _, err := ParseConfig(func(name string) string { return map[string]string{k: v}[name] }); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: %v", k, v, err)
		}
	}
}
