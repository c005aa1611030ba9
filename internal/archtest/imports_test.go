package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/dshd/dshd"

// Packages are named relative to the module root ("pkg/eventlog"; "." is the root package) in
// the tables below and in messages. A name ending in "/..." matches the package and every
// package below it.

// layers is the rank of each module package. Imports point down: a package may import (in its
// non-test files) only module packages of a lower rank, so packages of one rank never import
// each other. An exact name wins over a "/..." pattern, a longer pattern over a shorter one. A
// module package that matches no entry fails the test: give it a rank here. The table of
// docs/architecture.md section 1 shows the same ranks; change both together.
var layers = []struct {
	rank int
	pkgs []string
}{
	{0, []string{"pkg/fault"}},                                                     // error values and codes: the leaf
	{10, []string{"pkg/llm", "pkg/kernel"}},                                        // the model types, the fiber kernel
	{10, []string{".", "web", "migrations", "internal/pgcluster"}},                 // assets, SQL, local PostgreSQL
	{15, []string{"pkg/eventlog"}},                                                 // the log's vocabulary and seam
	{16, []string{"pkg/eventlog/eventlogtest"}},                                    // its conformance suite
	{20, []string{"pkg/registry", "pkg/promptasm"}},                                // the tool registry, prompts
	{20, []string{"pkg/llm/...", "pkg/tenant", "pkg/sandbox"}},                     // model clients, tenants, shell sandboxes and workspaces
	{21, []string{"pkg/sandbox/sandboxtest"}},                                      // the sandbox for tests
	{25, []string{"pkg/policy"}},                                                   // declarative tool policies
	{30, []string{"pkg/scheduler", "pkg/codemode", "pkg/tools/..."}},               // tool calls and the tools (tools/tooltest: their test runner)
	{30, []string{"pkg/preset", "pkg/approval"}},                                   // presets, durable approvals
	{40, []string{"pkg/agentloop"}},                                                // the turn loop
	{45, []string{"pkg/pgstore"}},                                                  // the PostgreSQL adapter
	{50, []string{"pkg/agents"}},                                                   // wiring per preset
	{60, []string{"pkg/worker"}},                                                   // leases, queues, runners
	{70, []string{"api"}},                                                          // HTTP and SSE
	{80, []string{"internal/mockllm", "internal/pgtest", "internal/contracttest"}}, // test infrastructure
	{85, []string{"internal/cli"}},                                                 // the client commands of the binary
	{90, []string{"internal/openapigen"}},                                          // the generator of openapi.yaml's event schemas
	{90, []string{"cmd/..."}},                                                      // programs
	{100, []string{"internal/e2e", "internal/archtest"}},                           // test-only packages
	{5, []string{"pkg/secretbox"}},                                                 // envelope encryption of stored secrets
	{5, []string{"pkg/telemetry"}},                                                 // metrics and trace helpers: below everything that records them
	{5, []string{"pkg/netguard"}},                                                  // outbound requests kept off private addresses
	{20, []string{"pkg/webhook"}},                                                  // tenant webhooks: signatures, delivery attempts
	{5, []string{"pkg/fairq"}},                                                     // a semaphore shared fairly by tenants (code mode, bash)
	{5, []string{"internal/envconf"}},                                              // settings from environment variables by struct tags
}

// The PostgreSQL adapter is the only package that may import pgx or a River driver; programs and
// test infrastructure are exempt. Only api may import chi; programs are exempt.
var (
	pgImports  = []string{"github.com/jackc/pgx/...", "github.com/riverqueue/river/riverdriver/..."}
	pgAllowed  = []string{"pkg/pgstore/...", "cmd/...", "internal/pgtest", "internal/pgcluster", "internal/e2e", "migrations"}
	chiImports = []string{"github.com/go-chi/chi/..."}
	chiAllowed = []string{"api/...", "cmd/..."}
)

// eventlogRoot and eventlogDeps: pkg/eventlog and everything it depends on (non-test, transitively)
// may be only the standard library and these packages. github.com/google/uuid (identifiers in
// the log's types; it imports only the standard library) is the one third-party package allowed.
var (
	eventlogRoot = "pkg/eventlog"
	eventlogDeps = []string{"pkg/eventlog", "pkg/llm", "pkg/fault", "github.com/google/uuid"}
)

// stdOnly: these packages import only the standard library and the module packages listed.
var stdOnly = map[string][]string{
	"pkg/fault":   nil,
	"pkg/llm":     {"pkg/fault"},
	"pkg/sandbox": {"pkg/netguard"}, // the shell providers and workspaces know nothing of tools or the log; the egress network's ranges are netguard's

	// outbound webhook requests: the address guard, and the tenant webhooks' signatures and attempts
	"pkg/netguard": nil,
	"pkg/webhook":  {"pkg/netguard"},

	"pkg/fairq": nil, // the fair semaphore of run_code programs and bash commands
}

// Nothing in pkg/ may import these, not even from test files.
var (
	libraries = "pkg/..."
	above     = []string{"api/...", "cmd/...", "internal/e2e/..."}
)

// pendingExceptions are today's known violations, each waiting for a change under way. A
// violation of any rule on a listed (package, import) is tolerated; the test fails on any other
// violation and on an entry that no longer matches one, so remove an entry when its import goes
// away: the list shrinks to empty.
var pendingExceptions = []exception{}

// Package is what the rules read of one package from `go list -deps -json`.
type Package struct {
	ImportPath   string
	Standard     bool
	Imports      []string // of the non-test files
	TestImports  []string
	XTestImports []string
}

// Violation is an import that breaks a rule. Pkg and Import are module-relative names for module
// packages and import paths otherwise; Import is empty when the package itself breaks the rule.
type Violation struct {
	Pkg, Import, Rule string
}

func (v Violation) String() string {
	if v.Import == "" {
		return v.Pkg + ": " + v.Rule
	}
	return v.Pkg + " imports " + v.Import + ": " + v.Rule
}

type exception struct{ pkg, imp, why string }

// name is the module-relative name of a module package and the import path of any other.
func name(importPath string) (string, bool) {
	if importPath == module {
		return ".", true
	}
	if rest, ok := strings.CutPrefix(importPath, module+"/"); ok {
		return rest, true
	}
	return importPath, false
}

// importPath is the inverse of name: a name whose first element has no dot is a module package.
func importPath(name string) string {
	switch first, _, _ := strings.Cut(name, "/"); {
	case name == ".":
		return module
	case strings.Contains(first, "."):
		return name
	}
	return module + "/" + name
}

func match(name, pattern string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "/..."); ok {
		return name == prefix || strings.HasPrefix(name, prefix+"/")
	}
	return name == pattern
}

func matchAny(name string, patterns []string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return match(name, p) })
}

// rank returns the layer of a module package: an exact entry, else the longest matching pattern.
func rank(pkg string) (int, bool) {
	best, bestLen, found := 0, -1, false
	for _, l := range layers {
		for _, p := range l.pkgs {
			switch {
			case p == pkg:
				return l.rank, true
			case match(pkg, p) && len(p) > bestLen:
				best, bestLen, found = l.rank, len(p), true
			}
		}
	}
	return best, found
}

// Check returns every violation of the rules in pkgs, the output of `go list -deps -json ./...`.
func Check(pkgs []Package) []Violation {
	byPath := map[string]*Package{}
	for i := range pkgs {
		byPath[pkgs[i].ImportPath] = &pkgs[i]
	}
	std := func(path string) bool { p := byPath[path]; return p != nil && p.Standard }
	var vs []Violation
	add := func(pkg, imp, rule string, args ...any) {
		vs = append(vs, Violation{pkg, imp, fmt.Sprintf(rule, args...)})
	}
	for _, p := range pkgs {
		pkg, ok := name(p.ImportPath)
		if !ok {
			continue
		}
		r, ranked := rank(pkg)
		if !ranked {
			add(pkg, "", "has no layer: give it a rank in layers (internal/archtest/imports_test.go)")
		}
		allowedModule, leaf := stdOnly[pkg]
		for _, ip := range p.Imports {
			imp, inModule := name(ip)
			if matchAny(imp, pgImports) && !matchAny(pkg, pgAllowed) {
				add(pkg, imp, "only the PostgreSQL adapter (pkg/pgstore) imports pgx and River drivers")
			}
			if matchAny(imp, chiImports) && !matchAny(pkg, chiAllowed) {
				add(pkg, imp, "only api imports chi")
			}
			if leaf && !std(ip) && !(inModule && slices.Contains(allowedModule, imp)) {
				add(pkg, imp, "%s imports only the standard library%s", pkg, andList(allowedModule))
			}
			if !inModule || !ranked {
				continue
			}
			if ri, ok := rank(imp); ok && ri >= r {
				add(pkg, imp, "imports point down the layers: %s has rank %d, %s rank %d (internal/archtest/imports_test.go)", pkg, r, imp, ri)
			}
		}
		if match(pkg, libraries) {
			for _, ip := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
				if imp, inModule := name(ip); inModule && matchAny(imp, above) {
					add(pkg, imp, "nothing in pkg/ imports api, cmd/... or internal/e2e (test files included)")
				}
			}
		}
	}
	vs = append(vs, checkClosure(byPath, eventlogRoot, eventlogDeps, std)...)
	return vs
}

// checkClosure walks the non-test dependencies of root through the allowed packages and reports
// each import of a walked package that is neither the standard library nor allowed. So it finds
// any dependency outside the allowed set, reported at the edge that brings it in.
func checkClosure(byPath map[string]*Package, root string, allowed []string, std func(string) bool) []Violation {
	var vs []Violation
	seen := map[string]bool{}
	queue := []string{importPath(root)}
	for len(queue) > 0 {
		ip := queue[0]
		queue = queue[1:]
		if seen[ip] {
			continue
		}
		seen[ip] = true
		p := byPath[ip]
		if p == nil {
			continue
		}
		pkg, _ := name(ip)
		for _, dep := range p.Imports {
			d, _ := name(dep)
			switch {
			case std(dep):
			case slices.Contains(allowed, d):
				queue = append(queue, dep)
			default:
				vs = append(vs, Violation{pkg, d, fmt.Sprintf("%s depends (transitively, non-test) only on the standard library and %s",
					root, strings.Join(slices.DeleteFunc(slices.Clone(allowed), func(a string) bool { return a == root }), ", "))})
			}
		}
	}
	return vs
}

func andList(pkgs []string) string {
	if len(pkgs) == 0 {
		return ""
	}
	return " and " + strings.Join(pkgs, ", ")
}

// reconcile splits violations into those no exception covers and reports the exceptions that
// cover none.
func reconcile(vs []Violation, exceptions []exception) (unexpected []Violation, stale []exception) {
	used := make([]bool, len(exceptions))
	for _, v := range vs {
		i := slices.IndexFunc(exceptions, func(e exception) bool { return e.pkg == v.Pkg && e.imp == v.Import })
		if i < 0 {
			unexpected = append(unexpected, v)
			continue
		}
		used[i] = true
	}
	for i, e := range exceptions {
		if !used[i] {
			stale = append(stale, e)
		}
	}
	return unexpected, stale
}

var loaded struct {
	once sync.Once
	pkgs []Package
	err  error
}

// load runs `go list -deps -json ./...` from the module root.
func load(t *testing.T) []Package {
	t.Helper()
	loaded.once.Do(func() { loaded.pkgs, loaded.err = goList() })
	if loaded.err != nil {
		t.Fatal(loaded.err)
	}
	return slices.Clone(loaded.pkgs)
}

func goList() ([]Package, error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return nil, err
	}
	gomod, err := exec.Command(gobin, "env", "GOMOD").Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if err := noteInputs(root); err != nil {
		return nil, err
	}
	cmd := exec.Command(gobin, "list", "-deps", "-json=ImportPath,Standard,Imports,TestImports,XTestImports", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list in %s: %w\n%s", cmd.Dir, err, stderr.Bytes())
	}
	var pkgs []Package
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p Package
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		pkgs = append(pkgs, p)
	}
	if !slices.ContainsFunc(pkgs, func(p Package) bool { return p.ImportPath == module+"/pkg/eventlog" }) {
		return nil, fmt.Errorf("go list in %s did not list %s/pkg/eventlog", cmd.Dir, module)
	}
	return pkgs, nil
}

// noteInputs reads every directory `go list ./...` reads, and the environment it depends on, so
// that go test's result cache, which sees only what this process opens (not what the go command
// it runs reads), reruns the test when a package's files change.
func noteInputs(root string) error {
	for _, k := range []string{"GOFLAGS", "GOOS", "GOARCH", "GOWORK", "GOEXPERIMENT", "CGO_ENABLED"} {
		os.Getenv(k)
	}
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || path == root {
			return err
		}
		if n := d.Name(); strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") || n == "testdata" {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
			return filepath.SkipDir // another module
		}
		return nil
	})
}

// TestImportRules checks the module's packages against the rules, less pendingExceptions.
func TestImportRules(t *testing.T) {
	t.Parallel()
	unexpected, stale := reconcile(Check(load(t)), pendingExceptions)
	for _, v := range unexpected {
		t.Errorf("%v", v)
	}
	for _, e := range stale {
		t.Errorf("pendingExceptions lists %s importing %s (%s), which no rule needs any more: remove the entry", e.pkg, e.imp, e.why)
	}
}

// TestCheckCatchesInjectedViolations adds forbidden imports to the real package list.
func TestCheckCatchesInjectedViolations(t *testing.T) {
	t.Parallel()
	pkgs := load(t)
	for i := range pkgs {
		switch pkgs[i].ImportPath {
		case module + "/pkg/llm":
			pkgs[i].Imports = append(slices.Clone(pkgs[i].Imports), "github.com/go-chi/chi/v5")
		case module + "/pkg/registry":
			pkgs[i].Imports = append(slices.Clone(pkgs[i].Imports), module+"/pkg/agentloop")
		}
	}
	unexpected, _ := reconcile(Check(pkgs), pendingExceptions)
	want := []string{
		"pkg/llm imports github.com/go-chi/chi/v5: only api imports chi",
		"pkg/llm imports github.com/go-chi/chi/v5: pkg/llm imports only the standard library and pkg/fault",
		"pkg/llm imports github.com/go-chi/chi/v5: pkg/eventlog depends", // pkg/llm is in its closure
		"pkg/registry imports pkg/agentloop: imports point down the layers",
	}
	for _, w := range want {
		if !slices.ContainsFunc(unexpected, func(v Violation) bool { return strings.HasPrefix(v.String(), w) }) {
			t.Errorf("no violation %q in %v", w, unexpected)
		}
	}
}

// TestCheckSynthetic runs the checker on a made-up module: every rule, exemptions, patterns, and
// the reconciliation with exceptions.
func TestCheckSynthetic(t *testing.T) {
	t.Parallel()
	m := func(n string) string { return module + "/" + n }
	pkgs := []Package{
		{ImportPath: "fmt", Standard: true},
		{ImportPath: "errors", Standard: true},
		{ImportPath: "github.com/google/uuid", Imports: []string{"fmt"}},
		{ImportPath: "github.com/jackc/pgx/v5", Imports: []string{"fmt"}},
		{ImportPath: "github.com/go-chi/chi/v5"},
		{ImportPath: "github.com/riverqueue/river/riverdriver/riverpgxv5"},
		{ImportPath: "example.com/other"},
		{ImportPath: m("pkg/fault"), Imports: []string{"errors"}},
		{ImportPath: m("pkg/llm"), Imports: []string{"fmt", m("pkg/fault"), "example.com/other"}},
		{ImportPath: m("pkg/kernel"), Imports: []string{"github.com/go-chi/chi/v5"}},
		{ImportPath: m("pkg/registry"), Imports: []string{m("pkg/kernel"), m("pkg/llm")}},
		{ImportPath: m("pkg/eventlog"), Imports: []string{"fmt", "github.com/google/uuid", m("pkg/llm"),
			"github.com/jackc/pgx/v5", m("pkg/registry")}},
		{ImportPath: m("pkg/scheduler"), Imports: []string{m("pkg/registry"), m("pkg/agentloop")}},
		{ImportPath: m("pkg/agentloop"), Imports: []string{m("pkg/scheduler")}},
		{ImportPath: m("pkg/tools/new"), Imports: []string{m("pkg/registry")}},
		{ImportPath: m("pkg/newthing"), Imports: []string{m("pkg/llm")}},
		{ImportPath: m("pkg/pgstore"), Imports: []string{"github.com/jackc/pgx/v5", m("pkg/eventlog")}},
		{ImportPath: m("pkg/worker"), Imports: []string{"github.com/riverqueue/river/riverdriver/riverpgxv5"},
			XTestImports: []string{m("api"), m("pkg/worker")}},
		{ImportPath: m("api"), Imports: []string{"github.com/go-chi/chi/v5", m("pkg/worker")}},
		{ImportPath: m("internal/pgtest"), Imports: []string{"github.com/jackc/pgx/v5", m("pkg/pgstore")}},
		{ImportPath: m("cmd/server"), Imports: []string{"github.com/jackc/pgx/v5", "github.com/go-chi/chi/v5", m("api")}},
	}
	var got []string
	for _, v := range Check(pkgs) {
		got = append(got, v.Pkg+" → "+v.Import)
	}
	slices.Sort(got)
	want := []string{
		"pkg/eventlog → github.com/jackc/pgx/v5", // adapter rule
		"pkg/eventlog → github.com/jackc/pgx/v5", // eventlog's dependencies
		"pkg/eventlog → pkg/registry",            // layers
		"pkg/eventlog → pkg/registry",            // eventlog's dependencies
		"pkg/kernel → github.com/go-chi/chi/v5",  // chi
		"pkg/llm → example.com/other",            // stdOnly
		"pkg/llm → example.com/other",            // eventlog's dependencies, via pkg/llm
		"pkg/newthing → ",                        // no layer
		"pkg/scheduler → pkg/agentloop",          // layers
		"pkg/worker → api",                       // nothing in pkg/ imports api
		"pkg/worker → github.com/riverqueue/river/riverdriver/riverpgxv5",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	unexpected, stale := reconcile(Check(pkgs), []exception{
		{"pkg/eventlog", "github.com/jackc/pgx/v5", ""},
		{"pkg/eventlog", "pkg/registry", ""},
		{"pkg/tenant", "github.com/jackc/pgx/v5", ""}, // no longer needed: stale
	})
	if len(unexpected) != 7 {
		t.Errorf("unexpected %v, want the 7 violations no exception covers", unexpected)
	}
	if len(stale) != 1 || stale[0].pkg != "pkg/tenant" {
		t.Errorf("stale %v, want the pkg/tenant entry", stale)
	}
}
