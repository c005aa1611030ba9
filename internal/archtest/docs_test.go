package archtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// families are the rule families of docs/rules.md.
const families = `REG|SCH|SCP|PRS|CODE|PIPE|APR|GRD|SCHED|RES|LOOP|SES|PRM|KRN`

var (
	// ruleID is a rule id (SES-14), optionally the start of a range (CODE-1..13, PRS-3–6).
	ruleID = regexp.MustCompile(`\b(` + families + `)-([0-9]+)(?:(?:\.\.|–)([0-9]+))?\b`)
	// ruleTest is a test named after a rule (TestSES14_...).
	ruleTest = regexp.MustCompile(`\bTest(` + families + `)([0-9]+)_`)
	// extensionID is one of dshd's extensions (E1): a capital E and a number standing alone (not
	// part of a word, a number, an escape or a colour such as #E0).
	extensionID = regexp.MustCompile(`(?:^|[^\w.\\#-])(E[0-9]+)\b`)
	// sectionID is a section-style id (B8, B1-B9); docs/rules.md has no such ids, so citing one
	// refers to a document outside the repository.
	sectionID = regexp.MustCompile(`(?:^|[^\w.\\#-])B([0-9]+)(?:-B?([0-9]+))?\b`)
	// rulesDocID is whatever follows "docs/rules.md" as the id it cites ("docs/rules.md, tool-fs").
	rulesDocID = regexp.MustCompile(`docs/rules\.md,? ([a-z][a-z0-9]*(?:-[a-z0-9]+)+)\b`)
	// scenarioRef is a scenario cited by number in prose ("scenario 8", "scenarios 20 to 25").
	scenarioRef = regexp.MustCompile(`(?i)\bscenarios? ([0-9]+(?:(?:, | to | and |-|–)[0-9]+)*)`)
	// scenarioTest is a scenario test (TestScenario38_..., TestScenarios06To11OverHTTP).
	scenarioTest = regexp.MustCompile(`\bTestScenarios?([0-9]+)(?:To([0-9]+))?`)
	// sectionRef is a numbered section of a document ("docs/architecture.md section 4", "§3").
	sectionRef = regexp.MustCompile(`(?:(?:docs/)?([a-z][a-z-]*)\.md\)?,? )?(?:[Ss]ection |§ ?)([0-9]+)\b`)
	// outsideRef is a reference to a document that is not part of the repository: its files,
	// its name, its extensions or its lettered sections.
	outsideRef = regexp.MustCompile(`\bshared/examples|\.\./shared/|\b(SPEC|DESIGN|STYLE)\.md\b|` +
		`\b(SPEC|DESIGN)\b|(?i:\bspec(?:ification)?'?s? extensions?\b)|(?i:\bsections? \([a-z]\))`)
	// docTest is a test, fuzz target or benchmark named in prose, maybe as a prefix (TestSES14_…,
	// TestKRN2_*).
	// A name followed by "<" is a pattern (TestScenario<NN>_…) and is not checked; one ending in
	// "_" is a prefix.
	docTest = regexp.MustCompile(`\b((?:Test|Fuzz|Benchmark)[A-Z0-9][A-Za-z0-9_]*)(…|\.\.\.|\*|<)?`)
	// goTest is the declaration of a test function.
	goTest = regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)[A-Za-z0-9_]*)\(`)
	// conformanceCase is a backquoted case of a conformance suite in docs/rules.md (SES1_...).
	conformanceCase = regexp.MustCompile("`((?:" + families + `)[0-9]+_[A-Za-z0-9_]+)` + "`")
)

// checkedFile reports whether f is a text file the documentation checks read.
func checkedFile(f string) bool {
	for _, ext := range []string{".go", ".md", ".yaml", ".yml", ".js", ".html", ".css", ".sql", ".sh", ".mjs", ".json"} {
		if strings.HasSuffix(f, ext) {
			return true
		}
	}
	base := filepath.Base(f)
	return base == "Makefile" || base == "Dockerfile" || strings.HasPrefix(f, ".ci/")
}

// self is this file: it spells the patterns it looks for.
const self = "internal/archtest/docs_test.go"

// repo is the tracked text files of the module and docs/rules.md.
type repo struct {
	root  string
	files map[string]string
	rules string
}

func readRepo(t *testing.T) repo {
	t.Helper()
	root := moduleRoot(t)
	out, err := exec.Command("git", "-C", root, "ls-files").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	r := repo{root: root, files: map[string]string{}}
	for _, f := range strings.Fields(string(out)) {
		if !checkedFile(f) || f == self || strings.Contains(f, "/testdata/") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue // deleted in the work tree
		}
		r.files[f] = string(b)
	}
	r.rules = r.files["docs/rules.md"]
	if r.rules == "" {
		t.Fatal("docs/rules.md is missing")
	}
	return r
}

// sorted returns the file names in order, so failures come in a stable order.
func (r repo) sorted() []string {
	names := make([]string, 0, len(r.files))
	for f := range r.files {
		names = append(names, f)
	}
	sort.Strings(names)
	return names
}

// definedIDs are the ids with a row in a table of docs/rules.md: rule ids, extensions and the
// tool error-code groups (`| SES-14 |`, `| E2 |`, `| tool-fs |`).
func definedIDs(rules string) map[string]bool {
	defined := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\| ([A-Za-z][A-Za-z0-9-]*) \|`).FindAllStringSubmatch(rules, -1) {
		defined[m[1]] = true
	}
	return defined
}

// definedScenarios are the scenario numbers of the scenario table of docs/rules.md (rows such
// as `| 07, 08 |` and `| 20–22 |`).
func definedScenarios(t *testing.T, rules string) map[int]bool {
	_, table, ok := strings.Cut(rules, "## Scenario tests")
	if !ok {
		t.Fatal("docs/rules.md has no section \"Scenario tests\"")
	}
	defined := map[int]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\| ([0-9][0-9, –]*) \|`).FindAllStringSubmatch(table, -1) {
		for _, n := range numbers(m[1]) {
			defined[n] = true
		}
	}
	return defined
}

// numbers expands "20 to 25", "07, 08, 09", "20–22" and "31-35" into the numbers they name.
func numbers(s string) []int {
	var out []int
	for _, part := range regexp.MustCompile(`, | and `).Split(s, -1) {
		lo, hi, isRange := part, "", false
		for _, sep := range []string{" to ", "–", "-"} {
			if a, b, ok := strings.Cut(part, sep); ok {
				lo, hi, isRange = a, b, true
				break
			}
		}
		a, err := strconv.Atoi(strings.TrimSpace(lo))
		if err != nil {
			continue
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil || b < a {
				b = a
			}
		}
		for n := a; n <= b; n++ {
			out = append(out, n)
		}
	}
	return out
}

// citedIDs returns the rule ids, extension ids, section ids and rules.md ids s cites, ranges
// expanded (CODE-1..3 is CODE-1, CODE-2, CODE-3).
func citedIDs(s string) []string {
	var ids []string
	for _, m := range ruleID.FindAllStringSubmatch(s, -1) {
		lo, _ := strconv.Atoi(m[2])
		hi := lo
		if m[3] != "" {
			hi, _ = strconv.Atoi(m[3])
		}
		for n := lo; n <= hi; n++ {
			ids = append(ids, fmt.Sprintf("%s-%d", m[1], n))
		}
	}
	for _, m := range ruleTest.FindAllStringSubmatch(s, -1) {
		ids = append(ids, m[1]+"-"+m[2])
	}
	for _, m := range extensionID.FindAllStringSubmatch(s, -1) {
		ids = append(ids, m[1])
	}
	for _, m := range sectionID.FindAllStringSubmatch(s, -1) {
		lo, _ := strconv.Atoi(m[1])
		hi := lo
		if m[2] != "" {
			hi, _ = strconv.Atoi(m[2])
		}
		for n := lo; n <= hi; n++ {
			ids = append(ids, fmt.Sprintf("B%d", n))
		}
	}
	for _, m := range rulesDocID.FindAllStringSubmatch(s, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// TestDocsDefineEveryCitedRule: every id the code, tests, README, contract and docs cite (a rule
// id such as SES-14, also as a test name TestSES14_... or in a range CODE-1..13; an extension
// such as E2; an id after "docs/rules.md") has a row in docs/rules.md, and no section-style id
// (B8) is cited: docs/rules.md has none.
func TestDocsDefineEveryCitedRule(t *testing.T) {
	r := readRepo(t)
	defined := definedIDs(r.rules)
	reported := map[string]bool{}
	for _, f := range r.sorted() {
		for _, id := range citedIDs(r.files[f]) {
			if !defined[id] && !reported[id] {
				t.Errorf("%s cites %s, which docs/rules.md does not define", f, id)
				reported[id] = true // once
			}
		}
	}
}

// TestNothingRefersOutsideTheRepository: no file names a document that is not part of the
// repository, its extensions or its lettered sections, and a numbered section cited as
// "docs/x.md section N" (or "§N" inside docs/x.md) is a numbered heading of that document.
func TestNothingRefersOutsideTheRepository(t *testing.T) {
	r := readRepo(t)
	for _, f := range r.sorted() {
		s := r.files[f]
		for _, loc := range outsideRef.FindAllStringIndex(s, -1) {
			t.Errorf("%s refers to a document outside the repository: %q", f, s[loc[0]:loc[1]])
		}
		for _, m := range sectionRef.FindAllStringSubmatch(s, -1) {
			doc := m[1]
			if doc == "" {
				if !strings.HasPrefix(f, "docs/") {
					t.Errorf("%s cites %q without naming the document in docs/", f, m[0])
					continue
				}
				doc = strings.TrimSuffix(filepath.Base(f), ".md")
			}
			text, ok := r.files["docs/"+doc+".md"]
			if !ok {
				t.Errorf("%s cites %q: docs/%s.md does not exist", f, m[0], doc)
				continue
			}
			if !regexp.MustCompile(`(?m)^## ` + m[2] + `\. `).MatchString(text) {
				t.Errorf("%s cites %q: docs/%s.md has no section %s", f, m[0], doc, m[2])
			}
		}
	}
}

// TestScenariosCitedAreInTheTable: every scenario cited by number, in prose ("scenario 8") or as
// a test name (TestScenario38_...), is a row of the scenario table of docs/rules.md.
func TestScenariosCitedAreInTheTable(t *testing.T) {
	r := readRepo(t)
	defined := definedScenarios(t, r.rules)
	for _, f := range r.sorted() {
		s := r.files[f]
		var cited []int
		for _, m := range scenarioRef.FindAllStringSubmatch(s, -1) {
			cited = append(cited, numbers(m[1])...)
		}
		for _, m := range scenarioTest.FindAllStringSubmatch(s, -1) {
			spec := m[1]
			if m[2] != "" {
				spec += " to " + m[2]
			}
			cited = append(cited, numbers(spec)...)
		}
		for _, n := range cited {
			if !defined[n] {
				t.Errorf("%s cites scenario %d, which the scenario table of docs/rules.md does not list", f, n)
			}
		}
	}
}

// TestDocsNameRealTests: every test, fuzz target or benchmark the docs and the README name is a
// function of a test file of the repository (a name written as a prefix, TestSES14_… or
// TestKRN2_*, must start one), and every conformance case docs/rules.md names is spelled in the
// code.
func TestDocsNameRealTests(t *testing.T) {
	r := readRepo(t)
	var tests []string
	code := strings.Builder{}
	for f, s := range r.files {
		if strings.HasSuffix(f, ".go") {
			code.WriteString(s)
		}
		if strings.HasSuffix(f, "_test.go") {
			for _, m := range goTest.FindAllStringSubmatch(s, -1) {
				tests = append(tests, m[1])
			}
		}
	}
	exists := func(name string, prefix bool) bool {
		for _, tn := range tests {
			if tn == name || (prefix && strings.HasPrefix(tn, name)) {
				return true
			}
		}
		return false
	}
	for _, f := range r.sorted() {
		if !strings.HasSuffix(f, ".md") {
			continue
		}
		for _, m := range docTest.FindAllStringSubmatch(r.files[f], -1) {
			if m[2] == "<" {
				continue
			}
			if !exists(m[1], m[2] != "" || strings.HasSuffix(m[1], "_")) {
				t.Errorf("%s names %s%s, which is no test of the repository", f, m[1], m[2])
			}
		}
	}
	all := code.String()
	for _, m := range conformanceCase.FindAllStringSubmatch(r.rules, -1) {
		if !strings.Contains(all, `"`+m[1]+`"`) {
			t.Errorf("docs/rules.md names the conformance case %s, which no Go file spells", m[1])
		}
	}
}

// section returns the text of the markdown section of doc under heading (up to the next heading
// of the same or a higher level).
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("no section %q", heading)
	}
	level := strings.Repeat("#", strings.Count(strings.Fields(heading)[0], "#"))
	if i := regexp.MustCompile(`(?m)^#{1,` + strconv.Itoa(len(level)) + `} `).FindStringIndex(rest); i != nil {
		rest = rest[:i[0]]
	}
	return rest
}

// TestReadmeLayoutNamesEveryPackage: the README's "Layout" names every Go package directory of
// the repository, a sub-package by its path or by its last element (`openai` under `pkg/llm`).
func TestReadmeLayoutNamesEveryPackage(t *testing.T) {
	r := readRepo(t)
	layout := section(t, r.files["README.md"], "## Layout")
	dirs := map[string]bool{}
	for f := range r.files {
		if strings.HasSuffix(f, ".go") && !strings.HasSuffix(f, "_test.go") {
			if d := filepath.Dir(f); d != "." {
				dirs[d] = true
			}
		}
	}
	for d := range dirs {
		if !strings.Contains(layout, "`"+d+"`") && !strings.Contains(layout, "`"+d+"/") &&
			!strings.Contains(layout, "`"+filepath.Base(d)+"`") {
			t.Errorf("README.md \"Layout\" does not name %s", d)
		}
	}
}

// TestReadmeFollowsEveryKind: the README's browser example listens to every event kind of
// docs/events.md's table "All kinds at a glance", so its "every event once" holds.
func TestReadmeFollowsEveryKind(t *testing.T) {
	r := readRepo(t)
	table := section(t, r.files["docs/events.md"], "## All kinds at a glance")
	_, types, ok := strings.Cut(r.files["README.md"], "const TYPES = [")
	if !ok {
		t.Fatal("README.md has no TYPES list")
	}
	types, _, _ = strings.Cut(types, "];")
	kinds := 0
	for _, row := range regexp.MustCompile(`(?m)^\| ([^|]+) \|`).FindAllStringSubmatch(table, -1) {
		for _, k := range regexp.MustCompile("`([a-z-]+/[a-z/-]+)`").FindAllStringSubmatch(row[1], -1) {
			kinds++
			if !strings.Contains(types, "'"+k[1]+"'") {
				t.Errorf("README.md's TYPES leaves out %s", k[1])
			}
		}
	}
	if kinds < 20 {
		t.Fatalf("read %d kinds from docs/events.md; the table moved?", kinds)
	}
}

// TestArchitectureShowsTheLayers: the layer table of docs/architecture.md section 1 has exactly
// the ranks of layers (imports_test.go): every entry in a row of its rank, and every package the
// table names (a backquoted path under pkg/, cmd/ or internal/, or ".", "web", "migrations",
// "api") at the rank layers gives it.
func TestArchitectureShowsTheLayers(t *testing.T) {
	r := readRepo(t)
	table := section(t, r.files["docs/architecture.md"], "## 1. Packages and layers")
	shown := map[string]int{}
	for _, row := range regexp.MustCompile(`(?m)^\| *([0-9]+) \| ([^|]+) \|`).FindAllStringSubmatch(table, -1) {
		rank, _ := strconv.Atoi(row[1])
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(row[2], -1) {
			p := m[1]
			if p == "." || p == "web" || p == "migrations" || p == "api" ||
				strings.HasPrefix(p, "pkg/") || strings.HasPrefix(p, "cmd/") || strings.HasPrefix(p, "internal/") {
				shown[p] = rank
			}
		}
	}
	want := map[string]int{}
	for _, l := range layers {
		for _, p := range l.pkgs {
			want[p] = l.rank
			if got, ok := shown[p]; !ok {
				t.Errorf("docs/architecture.md's layer table leaves out %s (rank %d)", p, l.rank)
			} else if got != l.rank {
				t.Errorf("docs/architecture.md shows %s at rank %d; imports_test.go has %d", p, got, l.rank)
			}
		}
	}
	for p, rank := range shown {
		if _, ok := want[p]; !ok {
			t.Errorf("docs/architecture.md shows %s at rank %d; imports_test.go has no such entry", p, rank)
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
