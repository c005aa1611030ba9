package api_test

import (
	"regexp"
	"strings"
	"testing"
)

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
