package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/pgtest"
	"github.com/dshd/dshd/pkg/sandbox/sandboxtest"
)

func TestParseConfigSandbox(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if c.SandboxNetwork || c.TenantWorkspaceBytes != 0 {
		t.Fatalf("defaults: network %v, tenant bytes %d", c.SandboxNetwork, c.TenantWorkspaceBytes)
	}
	env := map[string]string{"DSHD_SANDBOX_NETWORK": "1", "DSHD_TENANT_WORKSPACE_BYTES": "5000"}
	if c, err = ParseConfig(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if !c.SandboxNetwork || c.TenantWorkspaceBytes != 5000 {
		t.Fatalf("parsed: network %v, tenant bytes %d", c.SandboxNetwork, c.TenantWorkspaceBytes)
	}
	for k, v := range map[string]string{"DSHD_SANDBOX_NETWORK": "maybe", "DSHD_TENANT_WORKSPACE_BYTES": "-1"} {
		if _, err := ParseConfig(func(name string) string { return map[string]string{k: v}[name] }); err == nil {
			t.Errorf("%s=%s accepted", k, v)
		}
	}
}

// TestParseConfigSandboxEgressDeny: DSHD_SANDBOX_EGRESS_DENY is read as a list of ranges, bare
// addresses become single-address ranges, and anything else is refused at startup with the
// setting's name (review finding 9: the operator had no way to refuse the node's addresses).
func TestParseConfigSandboxEgressDeny(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DSHD_SANDBOX_EGRESS_DENY": " 203.0.113.0/24, 198.51.100.7,2001:db8::/32,, ::ffff:192.0.2.1 "}
	c, err := ParseConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("198.51.100.7/32"),
		netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("192.0.2.1/32")}
	if !slices.Equal(c.SandboxEgressDeny, want) {
		t.Errorf("parsed %v, want %v", c.SandboxEgressDeny, want)
	}
	for _, bad := range []string{"10.0.0.0/33", "node", "10.0.0.1/8/2", "fe80::1%eth0"} {
		_, err := ParseConfig(func(k string) string { return map[string]string{"DSHD_SANDBOX_EGRESS_DENY": bad}[k] })
		if err == nil || !strings.Contains(err.Error(), "DSHD_SANDBOX_EGRESS_DENY") {
			t.Errorf("%q: %v, want an error naming the setting", bad, err)
		}
	}
}

// sandboxServer runs the program with a workspace root and the bwrap shell, configured by edit;
// do calls it and returns the status and body.
func sandboxServer(t *testing.T, edit func(*Config)) func(method, path, key, body string) (int, []byte) {
	t.Helper()
	sandboxtest.Bwrap(t)
	m := NewMain()
	m.Config.DatabaseURL = pgtest.URL(t)
	m.Config.Addr = "127.0.0.1:0"
	m.Config.AdminToken = "admin"
	m.Config.WorkspaceRoot = sandboxtest.WorkspaceRoot(t)
	edit(&m.Config)
	if err := m.Run(context.Background()); err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return func(method, path, key, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, m.URL()+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
}

// TestSandboxNetworkForbiddenOverHTTP: with DSHD_SANDBOX_NETWORK=0 a preset asking for the
// sandbox network is refused with a 400 problem naming the field; without it, it is accepted.
func TestSandboxNetworkForbiddenOverHTTP(t *testing.T) {
	t.Parallel()
	do := sandboxServer(t, func(c *Config) { c.SandboxNetwork = false })
	_, b := do("POST", "/v1/tenants", "admin", `{"name":"t"}`)
	var tenant struct{ APIKey string }
	if err := json.Unmarshal(b, &tenant); err != nil {
		t.Fatal(err)
	}
	status, b := do("POST", "/v1/presets", tenant.APIKey,
		`{"name":"p","model":{"provider":"scripted","model":"m"},"tools":{"bash":{"network":true}}}`)
	var problem struct{ Code, Detail string }
	_ = json.Unmarshal(b, &problem)
	if status != http.StatusBadRequest || problem.Code != "invalid_request" ||
		!strings.Contains(problem.Detail, "tools.bash.network") || !strings.Contains(problem.Detail, "DSHD_SANDBOX_NETWORK=0") {
		t.Fatalf("%d %s", status, b)
	}
	if status, b := do("POST", "/v1/presets", tenant.APIKey,
		`{"name":"p","model":{"provider":"scripted","model":"m"},"tools":{"bash":{"network":false}}}`); status != http.StatusCreated ||
		!strings.Contains(string(b), `"bash":{"network":false}`) {
		t.Fatalf("network off: %d %s", status, b)
	}
}

// TestTenantWorkspaceBoundOverHTTP: with DSHD_TENANT_WORKSPACE_BYTES, a bash command that takes
// the tenant's workspaces over the bound says so in its result, and the tenant's next write, in
// another session, fails with FS_QUOTA_EXCEEDED.
func TestTenantWorkspaceBoundOverHTTP(t *testing.T) {
	t.Parallel()
	do := sandboxServer(t, func(c *Config) { c.TenantWorkspaceBytes = 4096 })
	decode := func(b []byte, v any) {
		t.Helper()
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
	}
	_, b := do("POST", "/v1/tenants", "admin", `{"name":"t"}`)
	var tenant struct{ APIKey string }
	decode(b, &tenant)
	_, b = do("POST", "/v1/presets", tenant.APIKey, `{"name":"p","model":{"provider":"scripted","model":"m"}}`)
	var preset struct{ ID string }
	decode(b, &preset)
	// result posts script to a new session and returns the data of its tool/result.
	result := func(script string) string {
		t.Helper()
		_, b := do("POST", "/v1/sessions", tenant.APIKey, `{"presetId":"`+preset.ID+`"}`)
		var session struct{ ID string }
		decode(b, &session)
		msg, _ := json.Marshal(map[string]string{"content": script})
		if status, b := do("POST", "/v1/sessions/"+session.ID+"/messages", tenant.APIKey, string(msg)); status >= 300 {
			t.Fatalf("post: %d %s", status, b)
		}
		var page struct {
			Events []struct{ Data json.RawMessage }
		}
		for deadline := time.Now().Add(60 * time.Second); len(page.Events) == 0 && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
			_, b := do("GET", "/v1/sessions/"+session.ID+"/events?types=tool/result", tenant.APIKey, "")
			decode(b, &page)
		}
		if len(page.Events) != 1 {
			t.Fatal("no tool/result within 60s")
		}
		return string(page.Events[0].Data)
	}
	// Two files, as one is cut at the room left (RLIMIT_FSIZE); the command ends before the
	// watchdog sees the tenant over the bound (the note after it) or is stopped by it.
	args := url.QueryEscape(`{"command":"head -c 3000 /dev/zero > a; head -c 2000 /dev/zero > b; echo wrote","description":"fill"}`)
	if got := result("tool:bash args:" + args); !strings.Contains(got, `wrote\n[workspace quota exceeded (FS_QUOTA_EXCEEDED)`) &&
		!strings.Contains(got, `[stopped: the command took this tenant's workspaces over their bound (FS_QUOTA_EXCEEDED)`) {
		t.Fatalf("bash over the bound: %s", got)
	}
	args = url.QueryEscape(`{"file_path":"a.txt","content":"more"}`)
	if got := result("tool:write args:" + args); !strings.Contains(got, `"FS_QUOTA_EXCEEDED"`) || !strings.Contains(got, `"isError":true`) {
		t.Fatalf("write over the bound: %s", got)
	}
}
