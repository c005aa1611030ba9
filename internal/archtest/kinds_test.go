package archtest

import (
	"regexp"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
)

// TestDashboardKnowsEveryKind: the dashboard's list of event kinds (web/app.js KNOWN_TYPES, the
// names its EventSource listens to), the vocabulary of pkg/eventlog (eventlog.KnownTypes) and
// docs/events.md (the table "All kinds at a glance" and the plugin-owned kinds) are the same
// list; the families known by prefix (`compaction/*`) are in eventlog and the docs, which an
// EventSource cannot listen to by name.
func TestDashboardKnowsEveryKind(t *testing.T) {
	r := readRepo(t)
	kind := regexp.MustCompile("`([a-z-]+/[a-z/*-]+)`")
	docs := map[string]bool{}
	for _, part := range []string{
		section(t, r.files["docs/events.md"], "## All kinds at a glance"),
		section(t, r.files["docs/events.md"], "## Unknown and ignorable kinds"),
	} {
		// the first column of the table's rows, and the lines of the plugin-owned list
		for _, row := range regexp.MustCompile("(?m)^\\| [^|]+ \\||^`.*$").FindAllString(part, -1) {
			for _, k := range kind.FindAllStringSubmatch(row, -1) {
				docs[k[1]] = true
			}
		}
	}
	_, list, ok := strings.Cut(r.files["web/app.js"], "const KNOWN_TYPES = [")
	if !ok {
		t.Fatal("web/app.js has no KNOWN_TYPES list")
	}
	list, _, _ = strings.Cut(list, "];")
	web := map[string]bool{}
	for _, k := range regexp.MustCompile(`'([^']+)'`).FindAllStringSubmatch(list, -1) {
		web[k[1]] = true
	}
	kinds, prefixes := eventlog.KnownTypes()
	code := map[string]bool{}
	for _, k := range kinds {
		code[k] = true
	}
	for _, p := range prefixes {
		if !docs[p+"*"] {
			t.Errorf("docs/events.md does not name the family %s* that pkg/eventlog knows", p)
		}
		delete(docs, p+"*")
	}
	compare := func(aName string, a map[string]bool, bName string, b map[string]bool) {
		for k := range a {
			if !b[k] {
				t.Errorf("%s has %s, %s does not", aName, k, bName)
			}
		}
	}
	compare("pkg/eventlog", code, "web/app.js KNOWN_TYPES", web)
	compare("web/app.js KNOWN_TYPES", web, "pkg/eventlog", code)
	compare("pkg/eventlog", code, "docs/events.md", docs)
	compare("docs/events.md", docs, "pkg/eventlog", code)
	if len(code) < 40 {
		t.Fatalf("pkg/eventlog knows %d kinds; the vocabulary moved?", len(code))
	}
}
