package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// makeRecipes reads the Makefile's rules: each target's prerequisites and recipe lines.
func makeRecipes(t *testing.T) (prereqs, recipes map[string][]string) {
	t.Helper()
	f, err := os.Open("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	prereqs, recipes = map[string][]string{}, map[string][]string{}
	rule := regexp.MustCompile(`^([A-Za-z0-9_-]+):([^=].*)?$`)
	target := ""
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		if m := rule.FindStringSubmatch(line); m != nil {
			target = m[1]
			prereqs[target] = strings.Fields(m[2])
			continue
		}
		if strings.HasPrefix(line, "\t") && target != "" {
			recipes[target] = append(recipes[target], strings.TrimSpace(line))
		} else if strings.TrimSpace(line) == "" || !strings.HasPrefix(line, "\t") {
			target = ""
		}
	}
	return prereqs, recipes
}

// ensureDepsArgs is the argument list of the scripts/ensure-deps.sh call that make target
// runs through its prerequisites (the first found).
func ensureDepsArgs(t *testing.T, target string) []string {
	t.Helper()
	prereqs, recipes := makeRecipes(t)
	if _, ok := prereqs[target]; !ok {
		t.Fatalf("the Makefile has no %s target", target)
	}
	seen := map[string]bool{}
	var walk func(string) []string
	walk = func(tg string) []string {
		if seen[tg] {
			return nil
		}
		seen[tg] = true
		for _, line := range recipes[tg] {
			if _, after, ok := strings.Cut(line, "scripts/ensure-deps.sh"); ok {
				return append([]string{}, strings.Fields(after)...)
			}
		}
		for _, p := range prereqs[tg] {
			if args := walk(p); args != nil {
				return args
			}
		}
		return nil
	}
	args := walk(target)
	if args == nil {
		t.Fatalf("make %s runs no scripts/ensure-deps.sh", target)
	}
	return args
}

// dryRunDeps runs scripts/ensure-deps.sh --dry-run with args on a PATH holding only the few
// commands the script itself uses (no node, npm, bwrap, pasta, nft or inotifywait), and returns
// what it says it would install.
func dryRunDeps(t *testing.T, args []string) string {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	bin := t.TempDir()
	for _, name := range []string{"dirname", "id", "readlink", "go"} {
		if p, err := exec.LookPath(name); err == nil {
			if err := os.Symlink(p, filepath.Join(bin, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	cmd := exec.Command(bash, append([]string{"../../scripts/ensure-deps.sh", "--dry-run"}, args...)...)
	cmd.Env = []string{"PATH=" + bin, "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ensure-deps.sh --dry-run %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestMakeRunInstallsOnlyWhatRunningNeeds (issue 21): `make run` installs the running server's
// needs (PostgreSQL, bubblewrap, passt and nftables for the bash tool's sandbox), never the
// test-only tools (Node.js, npm, Chromium, web/test's npm packages, inotify-tools), even on a
// machine that has none of them; `make test` installs those too.
func TestMakeRunInstallsOnlyWhatRunningNeeds(t *testing.T) {
	t.Parallel()
	run := dryRunDeps(t, ensureDepsArgs(t, "run"))
	for _, word := range []string{"node", "npm", "chromium", "inotify"} {
		if strings.Contains(run, word) {
			t.Errorf("make run would install %s:\n%s", word, run)
		}
	}
	for _, word := range []string{"bubblewrap", "passt"} {
		if !strings.Contains(run, word) {
			t.Errorf("make run would not install %s on a machine without it:\n%s", word, run)
		}
	}
	test := dryRunDeps(t, ensureDepsArgs(t, "test"))
	for _, word := range []string{"bubblewrap", "nodejs", "npm", "inotify-tools"} {
		if !strings.Contains(test, word) {
			t.Errorf("make test would not install %s on a machine without it:\n%s", word, test)
		}
	}
}
