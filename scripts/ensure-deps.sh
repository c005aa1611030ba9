#!/usr/bin/env bash
# Installs what `make test` and `make run` need on a fresh Debian machine that has only Go:
# Debian's `postgresql` package, when no PostgreSQL server binaries are found. Idempotent: it
# installs nothing when the binaries are already there, or when DATABASE_URL (or
# PGTEST_DATABASE_URL) points at an existing server.
#
# The search follows internal/pgcluster.BinDir: $PG_BINDIR, `pg_config --bindir`,
# /usr/lib/postgresql/<version>/bin, then initdb on $PATH.
set -euo pipefail

log() { printf 'ensure-deps: %s\n' "$*" >&2; }

if [ -n "${DATABASE_URL:-}" ] || [ -n "${PGTEST_DATABASE_URL:-}" ]; then
  log "DATABASE_URL is set; using that server, not installing PostgreSQL"
  exit 0
fi

command -v go >/dev/null 2>&1 || { log "Go is not on PATH; install Go first (see go.mod for the version)"; exit 1; }

has_server() {
  local d
  local candidates=()
  [ -n "${PG_BINDIR:-}" ] && candidates+=("$PG_BINDIR")
  if command -v pg_config >/dev/null 2>&1; then
    candidates+=("$(pg_config --bindir 2>/dev/null || true)")
  fi
  for d in /usr/lib/postgresql/*/bin; do candidates+=("$d"); done
  if command -v initdb >/dev/null 2>&1; then
    candidates+=("$(dirname "$(readlink -f "$(command -v initdb)")")")
  fi
  for d in "${candidates[@]}"; do
    if [ -x "$d/initdb" ] && [ -x "$d/postgres" ] && [ -x "$d/pg_ctl" ]; then
      return 0
    fi
  done
  return 1
}

if has_server; then
  # Running as root, initdb and postgres are run as the postgres user (internal/pgcluster).
  if [ "$(id -u)" -ne 0 ] || id postgres >/dev/null 2>&1; then
    exit 0
  fi
  log "PostgreSQL binaries found but the postgres user is missing; installing the package creates it"
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { log "PostgreSQL is missing and this user cannot install it (no sudo)"; exit 1; }
  sudo="sudo"
fi
command -v apt-get >/dev/null 2>&1 || { log "PostgreSQL is missing and apt-get is not available; install PostgreSQL's server binaries"; exit 1; }

log "installing Debian's postgresql package"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends postgresql >/dev/null
has_server || { log "postgresql installed but its server binaries were not found"; exit 1; }
log "PostgreSQL installed"
