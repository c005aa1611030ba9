package main

import "testing"

// TestParseTenantLimits: the DSHD_TENANT_* defaults of the tenants' limits, 0 or unset for none.
func TestParseTenantLimits(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if l := c.TenantLimits; l.RequestsPerSecond != nil || l.Burst != nil || l.TokensPerDay != nil || l.MaxSessions != nil ||
		l.MaxLogBytes != nil || l.MaxConcurrentTurns != nil {
		t.Fatalf("no limits by default: %+v", l)
	}
	env := map[string]string{"DSHD_TENANT_RPS": "2.5", "DSHD_TENANT_BURST": "7", "DSHD_TENANT_TOKENS_PER_DAY": "1000",
		"DSHD_TENANT_MAX_SESSIONS": "3", "DSHD_TENANT_MAX_LOG_BYTES": "0"}
	c, err = ParseConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	l := c.TenantLimits
	if *l.RequestsPerSecond != 2.5 || *l.Burst != 7 || *l.TokensPerDay != 1000 || *l.MaxSessions != 3 || l.MaxLogBytes != nil {
		t.Fatalf("parsed %+v", l)
	}
	for k, v := range map[string]string{"DSHD_TENANT_RPS": "-1", "DSHD_TENANT_BURST": "x", "DSHD_TENANT_TOKENS_PER_DAY": "-5",
		"DSHD_TENANT_MAX_SESSIONS": "1.5", "DSHD_TENANT_MAX_LOG_BYTES": "lots"} {
		if _, err := ParseConfig(func(name string) string { return map[string]string{k: v}[name] }); err == nil {
			t.Errorf("%s=%s accepted", k, v)
		}
	}
}
