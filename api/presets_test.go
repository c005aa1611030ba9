package api_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
)

type presetOut struct {
	ID      uuid.UUID
	Version int
	Name    string
	Model   struct{ Provider, Model string }
	Tools   struct {
		Mode                 string
		MaxParallelToolCalls int
	}
}

type sessionOut struct {
	ID            uuid.UUID
	PresetID      *uuid.UUID
	PresetVersion *int
	ParentSession string
	SeedLength    *int64
	LastSeq       int64
}

func TestPresetValidationOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct{ body, detail string }{
		{`{"name":"p","model":{"provider":"scripted","model":"m"},"tools":{"mode":"python"}}`, `tools.mode: unknown mode "python"`},
		{`{"name":"p","model":{"provider":"scripted","model":"m"},"prompt":{"sections":[{"name":"","order":1}]}}`, "prompt.sections[0].name: is required"},
		{`{"name":"p","model":{"provider":"scripted","model":"m"},"prompt":{"sections":[{"name":"a","order":1},{"name":"a","order":2}]}}`, `duplicate section name "a"`},
		{`{"name":"p","model":{"provider":"scripted","model":"m"},"prompt":{"sections":[{"name":"a","order":1e999}]}}`, "must be a number"},
		{`{"name":"p","model":{"provider":"scripted","model":"m"},"tools":{"toolOrder":["a"]}}`, `must contain "<unlisted-tools>" exactly once`},
		{`{"name":"p","model":{"provider":"scripted","model":"m"},"tools":{"toolOrder":["a","<unlisted-tools>","a"]}}`, `duplicate tool "a"`},
		{`{"name":"p","model":{"provider":"scripted","model":"m"},"tools":{"maxParallelSubCalls":0}}`, "tools.maxParallelSubCalls: must be an integer >= 1"},
		{`{"name":"p","model":{"provider":"claude","model":"m"}}`, `unknown provider "claude"`},
		{`{"name":"p","model":{"provider":"openai","model":"m","baseUrl":"http://10.0.0.1/v1"}}`, `host "10.0.0.1" is not allowed`},
		{`{"name":"p","model":{"provider":"scripted","model":"m"},"prompt":{"variables":{"Bad":"x"}}}`, `variable name "Bad" must match`},
		{`{"model":{"provider":"scripted","model":"m"}}`, "name: is required"},
	} {
		p := e.do(t, "POST", "/v1/presets", e.keyA, tc.body).wantProblem(t, http.StatusBadRequest, "invalid_request")
		if !strings.Contains(p.Detail, tc.detail) {
			t.Errorf("body %s: detail %q does not contain %q", tc.body, p.Detail, tc.detail)
		}
	}
	var list struct{ Items []any }
	e.do(t, "GET", "/v1/presets", e.keyA, nil).want(t, http.StatusOK).json(t, &list)
	if len(list.Items) != 0 {
		t.Fatalf("invalid presets were stored: %d", len(list.Items))
	}
}

// TestPresetVersionsAndSessionPinning: every PUT writes a new version, and a session keeps the
// version it was created with.
func TestPresetVersionsAndSessionPinning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var v1 presetOut
	e.do(t, "POST", "/v1/presets", e.keyA, minimalPreset).want(t, http.StatusCreated).json(t, &v1)
	if v1.Version != 1 || v1.Tools.Mode != "native" || v1.Tools.MaxParallelToolCalls != 10 {
		t.Fatalf("created %+v; want version 1 with defaults", v1)
	}
	path := "/v1/presets/" + v1.ID.String()
	var s1 sessionOut
	e.do(t, "POST", "/v1/sessions", e.keyA, map[string]any{"presetId": v1.ID}).want(t, http.StatusCreated).json(t, &s1)

	var v2 presetOut
	e.do(t, "PUT", path, e.keyA, `{"name":"p2","model":{"provider":"scripted","model":"other"},"tools":{"mode":"code"}}`).
		want(t, http.StatusOK).json(t, &v2)
	if v2.ID != v1.ID || v2.Version != 2 || v2.Name != "p2" || v2.Tools.Mode != "code" {
		t.Fatalf("updated %+v", v2)
	}
	e.do(t, "PUT", path, e.keyA, `{"name":"p3","model":{"provider":"scripted","model":"m"},"tools":{"mode":"x"}}`).
		wantProblem(t, http.StatusBadRequest, "invalid_request")
	var cur presetOut
	e.do(t, "GET", path, e.keyA, nil).want(t, http.StatusOK).json(t, &cur)
	if cur.Version != 2 || cur.Model.Model != "other" {
		t.Fatalf("current %+v; a rejected PUT must not write a version", cur)
	}
	var s2 sessionOut
	e.do(t, "POST", "/v1/sessions", e.keyA, map[string]any{"presetId": v1.ID}).want(t, http.StatusCreated).json(t, &s2)
	if *s1.PresetVersion != 1 || *s2.PresetVersion != 2 || *s2.PresetID != v1.ID {
		t.Fatalf("sessions pinned versions %d and %d; want 1 and 2", *s1.PresetVersion, *s2.PresetVersion)
	}
	var again sessionOut
	e.do(t, "GET", "/v1/sessions/"+s1.ID.String(), e.keyA, nil).want(t, http.StatusOK).json(t, &again)
	if *again.PresetVersion != 1 {
		t.Fatalf("session 1 now pins version %d", *again.PresetVersion)
	}

	e.do(t, "DELETE", path, e.keyA, nil).want(t, http.StatusNoContent)
	e.do(t, "GET", path, e.keyA, nil).wantProblem(t, http.StatusNotFound, "not_found")
	e.do(t, "POST", "/v1/sessions", e.keyA, map[string]any{"presetId": v1.ID}).wantProblem(t, http.StatusNotFound, "not_found")
	e.do(t, "GET", "/v1/sessions/"+s1.ID.String(), e.keyA, nil).want(t, http.StatusOK)
}

func TestPresetListPagination(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	want := map[uuid.UUID]bool{}
	for range 5 {
		want[e.presetCreate(t, e.keyA, minimalPreset)] = true
	}
	seen := map[uuid.UUID]bool{}
	cursor := ""
	for pages := 1; ; pages++ {
		var page struct {
			Items      []presetOut
			NextCursor string
		}
		e.do(t, "GET", "/v1/presets?limit=2&cursor="+cursor, e.keyA, nil).want(t, http.StatusOK).json(t, &page)
		for _, p := range page.Items {
			if !want[p.ID] || seen[p.ID] {
				t.Fatalf("page %d: unexpected or repeated %s", pages, p.ID)
			}
			seen[p.ID] = true
		}
		if page.NextCursor == "" {
			if pages != 3 {
				t.Fatalf("%d pages; want 3", pages)
			}
			break
		}
		cursor = page.NextCursor
	}
	if len(seen) != len(want) {
		t.Fatalf("saw %d of %d presets", len(seen), len(want))
	}
}

// TestFinding1_LargePresetIsRefusedOverHTTP: the preset of issue 9's finding 1 (20,000 prompt
// variables, 269 KB) is answered 400 at create and at PUT, with a detail that names the limit and
// does not echo the body, and no version is written.
func TestFinding1_LargePresetIsRefusedOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	vars := make(map[string]string, 20000)
	for i := range 20000 {
		vars[fmt.Sprintf("v%d", i)] = "value-" + strconv.Itoa(i)
	}
	big := map[string]any{"name": "big", "model": map[string]string{"provider": "scripted", "model": "m"},
		"prompt": map[string]any{"variables": vars}}
	p := e.do(t, "POST", "/v1/presets", e.keyA, big).wantProblem(t, http.StatusBadRequest, "invalid_request")
	if !strings.Contains(p.Detail, "prompt.variables") || !strings.Contains(p.Detail, "at most 256") || len(p.Detail) > 1024 {
		t.Fatalf("create detail %q; want the variables' limit, briefly", p.Detail)
	}
	var v1 presetOut
	e.do(t, "POST", "/v1/presets", e.keyA, minimalPreset).want(t, http.StatusCreated).json(t, &v1)
	path := "/v1/presets/" + v1.ID.String()
	p = e.do(t, "PUT", path, e.keyA, big).wantProblem(t, http.StatusBadRequest, "invalid_request")
	if !strings.Contains(p.Detail, "at most 256") || len(p.Detail) > 1024 {
		t.Fatalf("PUT detail %q; want the variables' limit, briefly", p.Detail)
	}
	var cur presetOut
	e.do(t, "GET", path, e.keyA, nil).want(t, http.StatusOK).json(t, &cur)
	if cur.Version != 1 {
		t.Fatalf("a refused PUT wrote version %d", cur.Version)
	}
}
