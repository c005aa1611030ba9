package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/pgtest"
)

func devdb(t *testing.T, dir, url string) map[string]string {
	t.Helper()
	var out bytes.Buffer
	getenv := func(k string) string {
		return map[string]string{"DATABASE_URL": url, "DSHD_ADMIN_TOKEN": "admin"}[k]
	}
	if err := run(context.Background(), []string{"devdb", "-dir", dir}, getenv, &out, &out); err != nil {
		t.Fatalf("devdb: %v\n%s", err, out.String())
	}
	env, err := readEnvFile(filepath.Join(dir, "dev.env"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), env["DSHD_API_KEY"]) {
		t.Fatalf("devdb did not print the key:\n%s", out.String())
	}
	return env
}

// TestDevDBIsIdempotent: a rerun reuses the tenant, key and preset; what was removed is recreated.
func TestDevDBIsIdempotent(t *testing.T) {
	t.Parallel()
	url, dir := pgtest.URL(t), t.TempDir()
	first := devdb(t, dir, url)
	for _, k := range []string{"DATABASE_URL", "DSHD_API_KEY", "DSHD_TENANT_ID", "DSHD_PRESET_ID", "DSHD_ADMIN_TOKEN"} {
		if first[k] == "" {
			t.Fatalf("dev.env lacks %s: %v", k, first)
		}
	}
	second := devdb(t, dir, url)
	if second["DSHD_API_KEY"] != first["DSHD_API_KEY"] || second["DSHD_PRESET_ID"] != first["DSHD_PRESET_ID"] {
		t.Fatalf("rerun changed the environment:\n%v\n%v", first, second)
	}
	// A lost key file: the tenant is kept and gets a new key; the preset is recreated.
	if err := os.WriteFile(filepath.Join(dir, "dev.env"), []byte("export DSHD_TENANT_ID='"+first["DSHD_TENANT_ID"]+"'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	third := devdb(t, dir, url)
	if third["DSHD_TENANT_ID"] != first["DSHD_TENANT_ID"] || third["DSHD_API_KEY"] == first["DSHD_API_KEY"] ||
		third["DSHD_PRESET_ID"] == first["DSHD_PRESET_ID"] {
		t.Fatalf("after losing dev.env:\n%v\n%v", first, third)
	}
}

// TestREADMEExamples runs the README's curl examples, as written, against the program on a free
// port with the environment `make run` prepares.
func TestREADMEExamples(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: runs the README's examples with bash and curl")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "<!-- examples:begin -->\n```sh\n")
	block, _, ok2 := strings.Cut(block, "```\n<!-- examples:end -->")
	if !ok || !ok2 {
		t.Fatal("README.md has no examples block")
	}
	m := newTestMain(t)
	dir := t.TempDir()
	devdb(t, filepath.Join(dir, ".data"), m.Config.DatabaseURL)
	script := strings.ReplaceAll(block, "http://localhost:8080", m.URL())
	cmd := exec.Command("bash", "-eu", "-c", script)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README examples failed: %v\n%s", err, out)
	}
	for _, want := range []string{
		`{"status":"ok"}`, `{"status":"ready"}`, "dshd_http_requests_total", "openapi: 3.1.0", "<title>dshd</title>",
		`"name":"acme","apiKey":"dshd_`, `"version":2`, `"mode":"both"`, `"presetVersion":2`, `{"messages":[]}`,
		`"type":"session/end-seed"`, "event: session/end-seed", `"code":"unauthorized"`, `"code":"invalid_request"`,
		"204\n204\n", "event: turn/end", "Done after 1 steps and 4 tool results.", `"messageId":`,
		`"cancelled":true`, `"system":"You are an AI agent running on dshd.`, `"name":"todo_write"`,
		`"status":"cancelled"`, `"toolErrors":1`, `"streamUrl":"/v1/sessions/`, `"usage":{"inputTokens":`,
		`"groupBy":"session"`, `"name":"dashboard"`, `"scopes":["read"]`, `"secret":"dshd_`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("README examples output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// TestDevDBSaysWhenItKeepsAPresetTheKeyWouldChange: a first run without DEEPSEEK_API_KEY makes
// a scripted default preset; a run with the key keeps it (it may have been edited) and says so,
// naming the way to a DeepSeek preset; removing the preset's line makes the DeepSeek one, and a
// keyless run then says that one needs the key.
func TestDevDBSaysWhenItKeepsAPresetTheKeyWouldChange(t *testing.T) {
	t.Parallel()
	url, dir := pgtest.URL(t), t.TempDir()
	runWith := func(key string) (string, map[string]string) {
		t.Helper()
		var out bytes.Buffer
		getenv := func(k string) string {
			return map[string]string{"DATABASE_URL": url, "DSHD_ADMIN_TOKEN": "admin", "DEEPSEEK_API_KEY": key}[k]
		}
		if err := run(context.Background(), []string{"devdb", "-dir", dir}, getenv, &out, &out); err != nil {
			t.Fatalf("devdb: %v\n%s", err, out.String())
		}
		env, err := readEnvFile(filepath.Join(dir, "dev.env"))
		if err != nil {
			t.Fatal(err)
		}
		return out.String(), env
	}
	out, first := runWith("")
	if strings.Contains(out, "Note:") {
		t.Fatalf("a first run notes:\n%s", out)
	}
	out, second := runWith("sk-test")
	if second["DSHD_PRESET_ID"] != first["DSHD_PRESET_ID"] || !strings.Contains(out, "Note: DEEPSEEK_API_KEY is set") ||
		!strings.Contains(out, "uses the scripted model") || !strings.Contains(out, "DSHD_PRESET_ID") {
		t.Fatalf("a run with the key over a scripted preset:\n%s", out)
	}
	// Without the preset's line, the run with the key makes a DeepSeek preset.
	delete(second, "DSHD_PRESET_ID")
	if err := writeEnvFile(filepath.Join(dir, "dev.env"), second); err != nil {
		t.Fatal(err)
	}
	out, third := runWith("sk-test")
	if third["DSHD_PRESET_ID"] == first["DSHD_PRESET_ID"] || strings.Contains(out, "Note:") {
		t.Fatalf("after removing the preset's line:\n%s", out)
	}
	out, _ = runWith("")
	if !strings.Contains(out, "Note: DEEPSEEK_API_KEY is not set") || !strings.Contains(out, "deepseek-chat") {
		t.Fatalf("a keyless run over a DeepSeek preset:\n%s", out)
	}
}
