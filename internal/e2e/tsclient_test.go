package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTSClient runs the TypeScript client's tests (clients/typescript, `npm test`: strict tsc,
// then node's test runner) against a real server process over PostgreSQL and cmd/mockllm. The
// client streams a turn with tool calls, answers an approval and cancels a turn; its streams go
// through a proxy whose connections the tests cut (POST $DSHD_CUT) to see them resume with
// Last-Event-ID, with no duplicate and no gap, and fetch a fresh stream token once the first one
// expired (DSHD_STREAM_TOKEN_TTL=2s).
//
// The test runs `npm ci` in clients/typescript when node_modules is missing or older than the
// lockfile, and fails when src/schema.ts is not what `npm run generate` makes of openapi.yaml. Without node and npm it skips, unless CI is set.
func TestTSClient(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "clients/typescript")
	npm, err := exec.LookPath("npm")
	if err == nil {
		_, err = exec.LookPath("node")
	}
	if err != nil {
		msg := "node and npm are needed (Debian's nodejs and npm): " + err.Error()
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if npmCINeeded(dir) {
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}

	// src/schema.ts is generated from openapi.yaml: a contract change needs `npm run generate`.
	check := exec.CommandContext(ctx, npm, "run", "--silent", "generate:check")
	check.Dir = dir
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("clients/typescript/src/schema.ts is not what openapi.yaml generates: run `npm run generate` in clients/typescript and commit it (%v)\n%s", err, out)
	}

	const ttl = 2 * time.Second
	c := newClusterOn(t, 1, 10*time.Second, "", "DSHD_STREAM_TOKEN_TTL="+ttl.String())
	r := c.replicas[0]
	proxy := newCutProxy(t)
	proxy.target = strings.TrimPrefix(r.url, "http://")
	go proxy.serve()
	cutter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		fmt.Fprintf(w, "%d\n", proxy.cut())
	}))
	defer cutter.Close()

	start := time.Now()
	cmd := exec.CommandContext(ctx, npm, "test")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"DSHD_URL="+proxy.url(),
		"DSHD_API_DIRECT="+r.url,
		"DSHD_API_KEY="+c.key,
		"DSHD_MOCK_URL="+c.mockURL,
		"DSHD_CUT="+cutter.URL,
		fmt.Sprintf("DSHD_STREAM_TOKEN_TTL_MS=%d", ttl.Milliseconds()),
	)
	out, err := cmd.CombinedOutput()
	t.Logf("npm test (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("the TypeScript client's tests failed: %v", err)
	}
	// Every test ran: none failed, none skipped (the end-to-end ones skip without DSHD_URL).
	for _, want := range []string{"# fail 0", "# skipped 0"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("npm test did not report %q", want)
		}
	}
	if strings.Contains(string(out), "# pass 0\n") {
		t.Fatal("npm test ran no test")
	}
}

// npmCINeeded reports whether dir's node_modules is missing or older than its lockfile, as
// scripts/ensure-deps.sh decides for web/test.
func npmCINeeded(dir string) bool {
	installed, err := os.Stat(filepath.Join(dir, "node_modules/.package-lock.json"))
	if err != nil {
		return true
	}
	lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	return err != nil || lock.ModTime().After(installed.ModTime())
}
