// Package dshd holds what belongs to the repository as a whole: the HTTP contract, openapi.yaml,
// embedded so the server serves the very file that is reviewed and tested.
package dshd

import _ "embed"

// OpenAPI is the content of openapi.yaml, the contract of the HTTP API, served at /openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
