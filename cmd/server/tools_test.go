package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/pgtest"
	"github.com/dshd/dshd/pkg/sandbox/sandboxtest"
)

func TestParseConfigTools(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if c.WorkspaceRoot != "" || c.Shell != "bwrap" || c.WorkspaceQuota != 1<<30 || c.SandboxUser != [2]int{65534, 65534} || c.WebAllowPrivate {
		t.Fatalf("defaults %+v", c)
	}
	if wt, err := c.workspaceTools(NewMain().Logger); wt != nil || err != nil {
		t.Fatalf("tools without a workspace root: %v %v", wt, err)
	}
	env := map[string]string{"DSHD_WORKSPACE_ROOT": "/srv/ws", "DSHD_SHELL": "local", "DSHD_WORKSPACE_QUOTA": "1000",
		"DSHD_SANDBOX_USER": "1001:1002", "DSHD_WEB_ALLOW_PRIVATE": "1"}
	if c, err = ParseConfig(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if c.WorkspaceRoot != "/srv/ws" || c.Shell != "local" || c.WorkspaceQuota != 1000 || c.SandboxUser != [2]int{1001, 1002} || !c.WebAllowPrivate {
		t.Fatalf("parsed %+v", c)
	}
	for k, v := range map[string]string{"DSHD_SHELL": "docker", "DSHD_WORKSPACE_QUOTA": "0", "DSHD_SANDBOX_USER": "0:0",
		"DSHD_WEB_ALLOW_PRIVATE": "perhaps"} {
		if _, err := ParseConfig(func(name string) string { return map[string]string{k: v}[name] }); err == nil {
			t.Errorf("%s=%s accepted", k, v)
		}
	}
	c.WorkspaceRoot, c.Shell = t.TempDir(), "off"
	wt, err := c.workspaceTools(NewMain().Logger)
	if err != nil || wt == nil || wt.Shell != nil {
		t.Fatalf("DSHD_SHELL=off: %+v %v", wt, err)
	}
}

// TestBashOverHTTP runs the whole program with a workspace root and the bwrap shell: a scripted
// model calls bash, the command writes a file in the session's workspace, and the result is logged.
func TestBashOverHTTP(t *testing.T) {
	t.Parallel()
	sandboxtest.Bwrap(t)
	root := sandboxtest.WorkspaceRoot(t)
	m := NewMain()
	m.Config.DatabaseURL = pgtest.URL(t)
	m.Config.Addr = "127.0.0.1:0"
	m.Config.AdminToken = "admin"
	m.Config.WorkspaceRoot = root
	if err := m.Run(context.Background()); err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	do := func(method, path, key, body string, v any) {
		t.Helper()
		req, _ := http.NewRequest(method, m.URL()+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatal(err)
		}
	}
	var tenant struct{ APIKey string }
	do("POST", "/v1/tenants", "admin", `{"name":"t"}`, &tenant)
	var preset, session struct{ ID string }
	do("POST", "/v1/presets", tenant.APIKey, `{"name":"p","model":{"provider":"scripted","model":"m"}}`, &preset)
	do("POST", "/v1/sessions", tenant.APIKey, `{"presetId":"`+preset.ID+`"}`, &session)
	args := url.QueryEscape(`{"command":"echo from-bash > f.txt; cat f.txt; cat /etc/shadow","description":"write a file"}`)
	msg, _ := json.Marshal(map[string]string{"content": "tool:bash args:" + args})
	var posted struct{ Seq int64 }
	do("POST", "/v1/sessions/"+session.ID+"/messages", tenant.APIKey, string(msg), &posted)
	var page struct {
		Events []struct {
			Data json.RawMessage
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(page.Events) == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		do("GET", "/v1/sessions/"+session.ID+"/events?types=tool/result", tenant.APIKey, "", &page)
	}
	if len(page.Events) != 1 {
		t.Fatal("no tool/result within 60s")
	}
	if got := string(page.Events[0].Data); !strings.Contains(got, `from-bash\n[stderr]\ncat: /etc/shadow: No such file or directory\n[exit code: 1]`) {
		t.Fatalf("tool/result %s", got)
	}
	if b, err := os.ReadFile(filepath.Join(root, session.ID, "files", "f.txt")); err != nil || string(b) != "from-bash\n" {
		t.Fatalf("the workspace file: %q %v", b, err)
	}
}
