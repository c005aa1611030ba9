#!/usr/bin/env bash
# Installs what dshd needs on a fresh Debian machine that has only Go. Two sets:
#
#   scripts/ensure-deps.sh run    what `make run` needs: running the server
#   scripts/ensure-deps.sh test   what `make test`, `fuzz`, `bench` and `loadgen` need: the run set
#                                 and the tools only tests use (the default without an argument)
#
# The run set:
# - Debian's `postgresql` package, when no PostgreSQL server binaries are found, unless
#   DATABASE_URL (or PGTEST_DATABASE_URL) points at an existing server. The search follows
#   internal/pgcluster.BinDir: $PG_BINDIR, `pg_config --bindir`, /usr/lib/postgresql/<version>/bin,
#   then initdb on $PATH.
# - Debian's `bubblewrap` package, when `bwrap` is not on PATH: the default shell sandbox of the
#   running server's bash tool (pkg/sandbox); `passt` (pasta) and `nftables` (nft), the sandbox's
#   egress-only network.
#
# The test set adds:
# - `inotify-tools`, which the sandbox escape suite's attacker commands use (inotifywait, run
#   inside the sandbox from the host's read-only /usr).
# - For the dashboard's browser test (internal/e2e TestDashboardInABrowser): Node.js and npm
#   (Debian's nodejs and npm) when missing, Debian's chromium when /usr/bin/chromium is missing,
#   and web/test's npm packages (`npm ci`: playwright-core only, which downloads no browser) when
#   web/test/node_modules is missing or older than the lockfile. DSHD_SKIP_BROWSER=1 skips this.
# - The npm packages of clients/typescript (the TypeScript client's tests) and tools/redocly (the
#   contract's lint), each with `npm ci` when its node_modules is missing or older than its lockfile.
#
# --dry-run (before the set) prints what would be installed, one `would install: ...` line a step,
# and installs nothing.
#
# Idempotent: it installs nothing that is already there.
set -euo pipefail

cd "$(dirname "$0")/.."

log() { printf 'ensure-deps: %s\n' "$*" >&2; }

dry_run=""
if [ "${1:-}" = "--dry-run" ]; then
  dry_run=1
  shift
fi
set_name="${1:-test}"
case "$set_name" in
  run | test) ;;
  *)
    log "unknown set '$set_name': use run or test"
    exit 2
    ;;
esac

# apt_install installs Debian packages, with sudo when not root.
apt_installed_update=""
apt_install() {
  if [ -n "$dry_run" ]; then
    printf 'would install: %s\n' "$*"
    return 0
  fi
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { log "$* missing and this user cannot install it (no sudo)"; return 1; }
    sudo="sudo"
  fi
  command -v apt-get >/dev/null 2>&1 || { log "$* missing and apt-get is not available; install it by hand"; return 1; }
  export DEBIAN_FRONTEND=noninteractive
  if [ -z "$apt_installed_update" ]; then
    $sudo apt-get update -qq
    apt_installed_update=1
  fi
  $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# ensure_sandbox installs the bash tool's sandbox and its network (run set).
ensure_sandbox() {
  local pkgs=()
  command -v bwrap >/dev/null 2>&1 || pkgs+=(bubblewrap)
  command -v pasta >/dev/null 2>&1 || pkgs+=(passt)
  [ -x /usr/sbin/nft ] || command -v nft >/dev/null 2>&1 || pkgs+=(nftables)
  [ ${#pkgs[@]} -eq 0 ] && return 0
  log "installing Debian's ${pkgs[*]} (the bash tool's sandbox and its network)"
  apt_install "${pkgs[@]}" || return 1
  [ -n "$dry_run" ] && return 0
  command -v bwrap >/dev/null 2>&1 || { log "bubblewrap installed but bwrap is not on PATH"; return 1; }
  log "${pkgs[*]} installed"
}

# ensure_escape_tools installs what the sandbox escape suite runs inside the sandbox (test set).
ensure_escape_tools() {
  command -v inotifywait >/dev/null 2>&1 && return 0
  log "installing Debian's inotify-tools (the sandbox escape suite)"
  apt_install inotify-tools || return 1
  [ -n "$dry_run" ] && return 0
  log "inotify-tools installed"
}

ensure_postgres() {
  if [ -n "${DATABASE_URL:-}" ] || [ -n "${PGTEST_DATABASE_URL:-}" ]; then
    log "DATABASE_URL is set; using that server, not installing PostgreSQL"
    return 0
  fi

  command -v go >/dev/null 2>&1 || { log "Go is not on PATH; install Go first (see go.mod for the version)"; return 1; }

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
      return 0
    fi
    log "PostgreSQL binaries found but the postgres user is missing; installing the package creates it"
  fi

  log "installing Debian's postgresql package"
  apt_install postgresql || return 1
  [ -n "$dry_run" ] && return 0
  has_server || { log "postgresql installed but its server binaries were not found"; return 1; }
  log "PostgreSQL installed"
}

# ensure_browser installs the dashboard browser test's Node.js, npm, Chromium and npm packages
# (test set).
ensure_browser() {
  if [ "${DSHD_SKIP_BROWSER:-}" = "1" ]; then
    return 0
  fi
  local pkgs=()
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    pkgs+=(nodejs npm)
  fi
  [ -x /usr/bin/chromium ] || pkgs+=(chromium)
  if [ ${#pkgs[@]} -gt 0 ]; then
    log "installing Debian's ${pkgs[*]} for the browser test"
    apt_install "${pkgs[@]}" || return 1
  fi
  local dir=web/test
  if [ ! -d "$dir/node_modules/playwright-core" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
    if [ -n "$dry_run" ]; then
      printf 'would install: npm ci in %s\n' "$dir"
      return 0
    fi
    log "npm ci in $dir (playwright-core)"
    (cd "$dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  fi
}

# ensure_node_packages installs, from their lockfiles, the npm packages of the TypeScript
# client's tests (clients/typescript: internal/e2e TestTSClient) and of the contract's lint
# (tools/redocly: make lint-contract), when a directory's node_modules is missing or older than
# its lockfile (test set; needs the Node.js and npm that ensure_browser installs).
ensure_node_packages() {
  command -v npm >/dev/null 2>&1 || return 0 # DSHD_SKIP_BROWSER=1 without node: the tests say so
  local dir
  for dir in clients/typescript tools/redocly; do
    if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
      if [ -n "$dry_run" ]; then
        printf 'would install: npm ci in %s\n' "$dir"
        continue
      fi
      log "npm ci in $dir"
      (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    fi
  done
}

ensure_sandbox
ensure_postgres
if [ "$set_name" = test ]; then
  ensure_escape_tools
  ensure_browser
  ensure_node_packages
fi
