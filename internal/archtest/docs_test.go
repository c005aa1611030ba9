package archtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	ruleID     = regexp.MustCompile(`\b(REG|SCH|SCP|PRS|CODE|PIPE|APR|GRD|SCHED|RES|LOOP|SES|PRM|KRN)-[0-9]+\b`)
	ruleTest   = regexp.MustCompile(`\bTest(REG|SCH|SCP|PRS|CODE|PIPE|APR|GRD|SCHED|RES|LOOP|SES|PRM|KRN)([0-9]+)_`)
	outsideRef = regexp.MustCompile(`\bshared/examples|\.\./shared/|\b(SPEC|DESIGN|STYLE)\.md\b`)
)

// TestDocsDefineEveryCitedRule: every rule id the code, tests, README and contract cite (also as
// a test name, TestSES14_...) has a row in docs/rules.md, and nothing refers to a file outside the
// repository.
func TestDocsDefineEveryCitedRule(t *testing.T) {
	root := moduleRoot(t)
	out, err := exec.Command("git", "-C", root, "ls-files").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	rules, err := os.ReadFile(filepath.Join(root, "docs", "rules.md"))
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\| ([A-Z]+-[0-9]+) \|`).FindAllStringSubmatch(string(rules), -1) {
		defined[m[1]] = true
	}
	for _, f := range strings.Fields(string(out)) {
		if !strings.HasSuffix(f, ".go") && !strings.HasSuffix(f, ".md") && !strings.HasSuffix(f, ".yaml") &&
			!strings.HasSuffix(f, ".js") && !strings.HasSuffix(f, ".html") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue // deleted in the work tree
		}
		s := string(b)
		if loc := outsideRef.FindStringIndex(s); loc != nil && f != "internal/archtest/docs_test.go" {
			t.Errorf("%s refers to a file outside the repository: %q", f, s[loc[0]:loc[1]])
		}
		if strings.HasPrefix(f, "docs/") {
			continue
		}
		ids := ruleID.FindAllString(s, -1)
		for _, m := range ruleTest.FindAllStringSubmatch(s, -1) {
			ids = append(ids, m[1]+"-"+m[2])
		}
		for _, id := range ids {
			if !defined[id] {
				t.Errorf("%s cites %s, which docs/rules.md does not define", f, id)
				defined[id] = true // once
			}
		}
	}
}

// moduleRoot returns the directory of go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}
