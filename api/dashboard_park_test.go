package api_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/pkg/eventlog"
)

// TestE6_DashboardAnswersAParkedTurn runs web/test/parked.mjs: headless Chromium answers a turn
// parked on a client-executed call through the dashboard's form, and the call's
// tool/client-result holds what was typed. The turn is written to the log directly (no model
// parks one here) and the server posts results through clientResults, so the turn stays parked,
// with nothing left to wait for, once answered. Without node, /usr/bin/chromium or
// web/test/node_modules the test skips, unless CI is set.
func TestE6_DashboardAnswersAParkedTurn(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	missing := ""
	switch {
	case err != nil:
		missing = "node"
	case !fileExists("/usr/bin/chromium"):
		missing = "/usr/bin/chromium"
	case !fileExists("../web/test/node_modules/playwright-core"):
		missing = "web/test/node_modules (npm ci)"
	}
	if missing != "" {
		if os.Getenv("CI") != "" {
			t.Fatal(missing + " is missing: run scripts/ensure-deps.sh")
		}
		t.Skip(missing + " is missing: run scripts/ensure-deps.sh")
	}
	e := newEnv(t, func(c *api.Config) { c.Turns = clientResults{Turns: c.Turns, log: c.Log} })
	sid := e.sessionCreate(t, e.keyA)
	e.parkClient(sid, time.Now().Add(time.Hour).UnixMilli(), "")

	dir, err := filepath.Abs("../web/test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "parked.mjs"), e.url, e.keyA, sid.String())
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DSHD_ARTIFACTS="+filepath.Join(dir, "artifacts"))
	out, err := cmd.CombinedOutput()
	t.Logf("parked.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the browser test failed: %v", err)
	}
	var got *eventlog.ClientResult
	for _, ev := range e.wholeLog(t, sid) {
		if r, err := eventlog.Decode[eventlog.ClientResult](ev); ev.Type == eventlog.TypeClientResult && err == nil {
			got = &r
		}
	}
	if got == nil || got.CallID != "c1" || !got.IsError || len(got.Content) != 1 || got.Content[0].Text != "blue" {
		t.Fatalf("tool/client-result %+v, want c1's error result \"blue\"", got)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
