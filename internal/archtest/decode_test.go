package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Event data is decoded only in pkg/eventlog (and the packages below it): the payload types, the
// turn fold (eventlog.FoldTurns, TurnOutcome), the usage fold and the splice sizes live there, and
// every other reader asks them (eventlog.Decode, TurnNumber, MessageID, SpliceSizeOf, ...). The
// rule has no exceptions. It reads every non-test Go file of the module and refuses a call of
// encoding/json's Unmarshal or NewDecoder whose arguments read a field named Data (ev.Data,
// evs[0].Data, bytes.NewReader(e.Data)): an event's data, or something that looks like it and
// is better renamed. Tests may decode what they check. The SQL JSON paths that remain in
// pkg/pgstore are listed, with the plan for them, in docs/architecture.md section 3.

// decodeHome are the packages that may decode event data.
const decodeHome = "pkg/eventlog/"

// dataDecodes returns "file:line: call" for each call in the Go source src (named file) that
// decodes a Data field with encoding/json.
func dataDecodes(file string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	jsonName := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "encoding/json" {
			jsonName = "json"
			if imp.Name != nil {
				jsonName = imp.Name.Name
			}
		}
	}
	if jsonName == "" {
		return nil, nil
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || (sel.Sel.Name != "Unmarshal" && sel.Sel.Name != "NewDecoder") {
			return true
		}
		if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != jsonName {
			return true
		}
		for _, arg := range call.Args {
			if readsData(arg) {
				out = append(out, fset.Position(call.Pos()).String()+": "+jsonName+"."+sel.Sel.Name)
				break
			}
		}
		return true
	})
	return out, nil
}

// readsData reports whether e reads a field named Data anywhere inside it.
func readsData(e ast.Expr) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if s, ok := n.(*ast.SelectorExpr); ok && s.Sel.Name == "Data" {
			found = true
		}
		return !found
	})
	return found
}

// TestEventDataDecodedOnlyInEventlog: no non-test file outside pkg/eventlog decodes event data.
// Issue 18 found a turn's outcome folded from the log in six places through anonymous structs,
// two of them disagreeing on what a failed turn is; this keeps a seventh from appearing.
func TestEventDataDecodedOnlyInEventlog(t *testing.T) {
	r := readRepo(t)
	files := 0
	for _, name := range r.sorted() {
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || strings.HasPrefix(name, decodeHome) {
			continue
		}
		files++
		found, err := dataDecodes(name, []byte(r.files[name]))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range found {
			t.Errorf("%s decodes event data outside pkg/eventlog: read it with a function of pkg/eventlog (Decode, TurnNumber, FoldTurns, SpliceSizeOf, ...)", f)
		}
	}
	if files < 50 {
		t.Fatalf("read %d Go files; the walk is broken?", files)
	}
}

// TestDataDecodeRuleCatchesEveryForm: the rule sees the forms a decode takes.
func TestDataDecodeRuleCatchesEveryForm(t *testing.T) {
	src := `package p
import (
	"bytes"
	js "encoding/json"
)
func f(ev, evs, e, x any) {
	_ = js.Unmarshal(ev.Data, &x)
	_ = js.Unmarshal(evs[0].Data, &x)
	_ = js.NewDecoder(bytes.NewReader(e.Data)).Decode(&x)
	_ = js.Unmarshal(x.Body, &x)
}
`
	found, err := dataDecodes("p.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 3 {
		t.Fatalf("found %v, want the three decodes of a Data field", found)
	}
}

// sqlDataPath is a JSON path into an event's stored data in SQL (e.data->>'turn', data #> '{a}').
var sqlDataPath = regexp.MustCompile(`\bdata\s*(?:->>?|#>>?)\s*'[^']*'`)

// plannedSQLPaths are the SQL JSON paths into event data that remain, by file, as
// docs/architecture.md section 3 lists them with the plan that removes them. The list may only
// shrink: a new path reads event data outside pkg/eventlog.
var plannedSQLPaths = map[string]int{
	"pkg/pgstore/status.go": 4, // data->>'turn' twice (SessionStates, TurnBefore), data->>'id' of asked and decided
	// data->>'id' of approval/asked and approval/decided: the approvals table's trigger (3, with
	// its guard against an id-less event) and its one-time fill from the logs written before it (8).
	"migrations/00018_approvals.sql": 11,
}

// TestSQLReadsNoNewEventDataPaths: the SQL of the module (non-test Go files and migrations) reads
// JSON paths of event data only where the plan lists them.
func TestSQLReadsNoNewEventDataPaths(t *testing.T) {
	r := readRepo(t)
	got := map[string]int{}
	for _, name := range r.sorted() {
		if strings.HasSuffix(name, "_test.go") || !(strings.HasSuffix(name, ".go") || strings.HasSuffix(name, ".sql")) {
			continue
		}
		if n := len(sqlDataPath.FindAllString(r.files[name], -1)); n > 0 {
			got[name] = n
		}
	}
	for name, n := range got {
		if n > plannedSQLPaths[name] {
			t.Errorf("%s reads %d JSON paths of event data in SQL; the plan (docs/architecture.md section 3) has %d there", name, n, plannedSQLPaths[name])
		}
	}
	for name, n := range plannedSQLPaths {
		if got[name] < n {
			t.Errorf("%s reads %d JSON paths of event data, fewer than the %d planned: shrink plannedSQLPaths and the docs", name, got[name], n)
		}
	}
}
