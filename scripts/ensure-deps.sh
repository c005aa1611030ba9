#!/usr/bin/env bash
# Installs what `make test` and `make run` need on a fresh Debian machine that has only Go:
# Debian's `bubblewrap` package, when `bwrap` is not on PATH (the default shell sandbox of the
# bash tool, pkg/sandbox; its tests run it), and Debian's `postgresql` package, when no PostgreSQL
# server binaries are found. Idempotent: it installs nothing that is already there; PostgreSQL is
# not installed when DATABASE_URL (or PGTEST_DATABASE_URL) points at an existing server.
#
# The search follows internal/pgcluster.BinDir: $PG_BINDIR, `pg_config --bindir`,
# /usr/lib/postgresql/<version>/bin, then initdb on $PATH.
set -euo pipefail

log() { printf 'ensure-deps: %s\n' "$*" >&2; }

# apt_install installs Debian packages, as root or through sudo; it fails with a message naming
# what is missing when neither works.
apt_updated=""
apt_install() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { log "$* missing and this user cannot install it (no sudo)"; return 1; }
    sudo="sudo"
  fi
  command -v apt-get >/dev/null 2>&1 || { log "$* missing and apt-get is not available; install it by hand"; return 1; }
  export DEBIAN_FRONTEND=noninteractive
  if [ -z "$apt_updated" ]; then
    $sudo apt-get update -qq
    apt_updated=1
  fi
  $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# bubblewrap first: it is needed whichever PostgreSQL is used.
if ! command -v bwrap >/dev/null 2>&1; then
  log "installing Debian's bubblewrap package (the bash tool's sandbox)"
  apt_install bubblewrap
  command -v bwrap >/dev/null 2>&1 || { log "bubblewrap installed but bwrap is not on PATH"; exit 1; }
  log "bubblewrap installed"
fi

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

log "installing Debian's postgresql package"
apt_install postgresql
has_server || { log "postgresql installed but its server binaries were not found"; exit 1; }
log "PostgreSQL installed"
