// Package e2e holds end-to-end tests that run the real programs: `cmd/server` replicas as
// separate processes over one PostgreSQL database (internal/pgtest), and `cmd/mockllm` as their
// model. The tests talk to them only over HTTP and SSE, as clients in production do, and kill
// replicas with SIGKILL to check crash repair. The package has no non-test code.
package e2e
