// Package archtest checks the module's import rules: which packages may import the PostgreSQL
// driver, River's drivers and chi, what pkg/eventlog may depend on, and that imports point down
// the layers. The rules, the layer table and the list of pending exceptions are in
// imports_test.go; `go test ./internal/archtest` runs them (so do `make lint` and `make test`).
// The package has no non-test code.
package archtest
