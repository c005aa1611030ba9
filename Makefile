# dshd: `make run` serves a development instance on :8080 over a local PostgreSQL in ./.data;
# `make test` runs every test against a throwaway PostgreSQL, then a brief fuzz pass. Both install
# what they need first when it is missing (scripts/ensure-deps.sh): `run` only what running needs
# (PostgreSQL, the bash tool's sandbox: `deps-run`), `test`, `fuzz`, `bench` and `loadgen` that and
# the test-only tools (the sandbox escape suite's, the browser test's Node.js and Chromium:
# `deps`); `make lint` checks formatting, vet, the import rules
# and go.mod.

GO       ?= go
BIN      ?= bin/dshd
BENCH    ?= .
BENCHPKG ?= ./...
NORACE   ?= ^(TestHostile.*|TestIdleSubscriberMemory|TestStalledReadersAreCheap)$$

# Development settings for `make run`; override on the command line or in the environment.
export DSHD_ADDR        ?= 127.0.0.1:8080
export DSHD_ADMIN_TOKEN ?= dev-admin-token
export DSHD_DEMO_TOOLS  ?= 1

.PHONY: run test bench lint build deps deps-run loadgen fuzz lint-contract

# deps installs what the tests need (the run set and the test-only tools), deps-run only what
# running the server needs.
deps:
	@scripts/ensure-deps.sh test

deps-run:
	@scripts/ensure-deps.sh run

build:
	$(GO) build -o $(BIN) ./cmd/server

# devdb starts (or reuses) the cluster in ./.data, applies migrations, makes sure the development
# tenant, its API key and a default preset exist, and writes them to ./.data/dev.env.
run: deps-run build
	./$(BIN) devdb
	. ./.data/dev.env && exec ./$(BIN) serve

# test runs every test under the race detector, then, without it, the tests whose bounds the race
# detector would blur (hostile code-mode programs, idle and stalled SSE subscribers' memory), then
# a brief fuzz pass of the HTTP surface (`fuzz` for TESTFUZZTIME each), which fails on a crash.
# The pass is a count of inputs, not a duration: with a duration, Go 1.26's fuzz coordinator can
# fail a target with a bare "context deadline exceeded" when the time runs out while a loaded
# machine's worker is mid-input (golang/go#75804, fixed in Go 1.27).
TESTFUZZTIME ?= 2000x
test: deps
	$(GO) test -race ./...
	$(GO) test -count=1 -run '$(NORACE)' ./pkg/codemode ./api
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(TESTFUZZTIME)
	@$(MAKE) --no-print-directory lint-contract

# lint-contract lints openapi.yaml with the Redocly CLI pinned in tools/redocly (0 errors and 0
# warnings: redocly.yaml there names each rule turned off and why); test-only, it installs Node.js
# and the CLI (npm ci) when missing. The generated event schemas are checked by internal/openapigen's test.
lint-contract:
	@tools/redocly/lint.sh

# fuzz runs every fuzz target of the HTTP surface (package api: request bodies, list and history
# cursors, event queries and Last-Event-ID, the Authorization and Idempotency-Key headers), one
# after the other, for FUZZTIME each, with one worker. Their seed corpora (api/testdata/fuzz) also
# run as plain tests in `make test`; an input that fails is written there, to be committed with
# its fix.
FUZZTIME ?= 30s
fuzz: deps
	@for f in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' api/*_test.go); do \
		echo "$$f ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -parallel 1 ./api || exit 1; \
	done

bench: deps
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem $(BENCHPKG)

# loadgen measures the main path: text, tools:1, tools:16 and steps:20 turns over HTTP and SSE with
# every event durable, at 1 and 8 concurrent sessions, next to the in-process loop and the
# PostgreSQL insert ceiling; TURNS, SESSIONS and DURATION (per case) tune it.
TURNS ?= text,tools:1,tools:16,steps:20
SESSIONS ?= 1,8
DURATION ?= 5s
loadgen: deps
	$(GO) run ./cmd/loadgen -turns $(TURNS) -sessions $(SESSIONS) -duration $(DURATION)

# lint: gofmt, go vet, the import rules (internal/archtest; `make test` runs them too) and a tidy
# go.mod/go.sum (`go mod tidy -diff` prints what tidying would change and fails if anything would).
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) test ./internal/archtest
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }
