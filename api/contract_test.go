package api_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/pkg/pgstore"
)

// undocumentedRoutes are the routes the router serves that openapi.yaml deliberately leaves out,
// each with why. None today: the probes, /metrics, /openapi.yaml itself and the dashboard are
// documented like the API.
var undocumentedRoutes = map[string]string{}

// specOperations is every operation of openapi.yaml as "METHOD /path" with its operationId.
func specOperations(t *testing.T) map[string]string {
	t.Helper()
	c := loadContract(t)
	paths, _ := c.spec["paths"].(map[string]any)
	ops := map[string]string{}
	for path, item := range paths {
		for method, op := range item.(map[string]any) {
			if method == "parameters" || method == "summary" || method == "description" {
				continue
			}
			id, _ := op.(map[string]any)["operationId"].(string)
			ops[strings.ToUpper(method)+" "+path] = id
		}
	}
	return ops
}

// TestOperationIDs: every operation has an operationId, a camelCase verb and noun, and no two
// operations share one (client generators name their methods after them).
func TestOperationIDs(t *testing.T) {
	t.Parallel()
	camel := regexp.MustCompile(`^[a-z]+[A-Z][A-Za-z0-9]*$`)
	byID := map[string]string{}
	for op, id := range specOperations(t) {
		switch {
		case id == "":
			t.Errorf("%s has no operationId", op)
			continue
		case !camel.MatchString(id):
			t.Errorf("%s: operationId %q is not a camelCase verb and noun", op, id)
		}
		if other, ok := byID[id]; ok {
			t.Errorf("operationId %q names both %s and %s", id, other, op)
		}
		byID[id] = op
	}
}

// TestSpecPathsMatchRoutes: the spec's operations are one to one the router's routes (chi.Walk
// over the server's router, Server.Routes), less undocumentedRoutes. The router is built as in
// production; building it touches no database.
func TestSpecPathsMatchRoutes(t *testing.T) {
	t.Parallel()
	srv := api.New(api.Config{Log: &pgstore.Store{}})
	defer srv.Close()
	routes := srv.Routes()
	ops := specOperations(t)
	for _, r := range routes {
		if _, ok := undocumentedRoutes[r]; ok {
			if _, documented := ops[r]; documented {
				t.Errorf("%s is listed as undocumented but openapi.yaml documents it", r)
			}
			continue
		}
		if _, ok := ops[r]; !ok {
			t.Errorf("the router serves %s, which openapi.yaml does not document", r)
		}
	}
	for op := range ops {
		if !slices.Contains(routes, op) {
			t.Errorf("openapi.yaml documents %s, which the router does not serve", op)
		}
	}
	for r := range undocumentedRoutes {
		if !slices.Contains(routes, r) {
			t.Errorf("undocumentedRoutes lists %s, which the router does not serve", r)
		}
	}
}

// no4xx are the operations that answer no 4xx, so document none: Redocly's
// operation-4xx-response rule is off for them (tools/redocly/redocly.yaml), and this test holds
// every other operation to it.
var no4xx = []string{"GET /healthz", "GET /readyz", "GET /openapi.yaml", "GET /"}

// TestOperationsDocument4xx: every operation but no4xx documents a 4xx answer.
func TestOperationsDocument4xx(t *testing.T) {
	t.Parallel()
	c := loadContract(t)
	paths, _ := c.spec["paths"].(map[string]any)
	for op := range specOperations(t) {
		method, path, _ := strings.Cut(op, " ")
		responses, _ := paths[path].(map[string]any)[strings.ToLower(method)].(map[string]any)["responses"].(map[string]any)
		has := false
		for status := range responses {
			has = has || strings.HasPrefix(status, "4")
		}
		switch listed := slices.Contains(no4xx, op); {
		case !has && !listed:
			t.Errorf("%s documents no 4xx answer", op)
		case has && listed:
			t.Errorf("%s documents a 4xx answer but no4xx lists it", op)
		}
	}
}
