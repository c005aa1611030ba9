package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/pgtest"
)

// TestCredentialConfig: credentials are disabled and the operator's key is lent by default;
// DSHD_CREDENTIAL_KEYS is read active key first; a bad key is refused without showing it.
func TestCredentialConfig(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(func(string) string { return "" })
	if err != nil || c.CredentialKeys != nil || !c.OperatorKeyFallback {
		t.Fatalf("defaults keys=%v fallback=%v, %v", c.CredentialKeys, c.OperatorKeyFallback, err)
	}
	k1 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	k2 := base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32))
	env := map[string]string{"DSHD_CREDENTIAL_KEYS": "new:" + k2 + ", old:" + k1, "DSHD_OPERATOR_KEY_FALLBACK": "0"}
	c, err = ParseConfig(func(k string) string { return env[k] })
	if err != nil || c.CredentialKeys.ActiveID() != "new" || strings.Join(c.CredentialKeys.IDs(), ",") != "new,old" ||
		c.OperatorKeyFallback {
		t.Fatalf("config keys=%v fallback=%v, %v", c.CredentialKeys, c.OperatorKeyFallback, err)
	}
	short := base64.StdEncoding.EncodeToString([]byte("sixteen byte key"))
	for k, v := range map[string]string{"DSHD_CREDENTIAL_KEYS": "a:" + short, "DSHD_OPERATOR_KEY_FALLBACK": "sometimes"} {
		_, err := ParseConfig(func(name string) string { return map[string]string{k: v}[name] })
		if err == nil || !strings.Contains(err.Error(), k) || strings.Contains(err.Error(), short) {
			t.Errorf("%s=%s: %v", k, v, err)
		}
	}
}

// TestRewrapCredentialsCommand: the subcommand needs DSHD_CREDENTIAL_KEYS and reports what it did
// on an empty database.
func TestRewrapCredentialsCommand(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	var out bytes.Buffer
	err := run(context.Background(), []string{"rewrap-credentials"}, func(k string) string {
		return map[string]string{"DATABASE_URL": url}[k]
	}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "DSHD_CREDENTIAL_KEYS") {
		t.Fatalf("without keys: %v", err)
	}
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	err = run(context.Background(), []string{"rewrap-credentials"}, func(k string) string {
		return map[string]string{"DATABASE_URL": url, "DSHD_CREDENTIAL_KEYS": "k7:" + key}[k]
	}, &out, &out)
	if err != nil || !strings.Contains(out.String(), `under key "k7": 0 rewrapped, 0 already current, 0 failed`) ||
		strings.Contains(out.String(), key) {
		t.Fatalf("rewrap: %v\n%s", err, out.String())
	}
}
