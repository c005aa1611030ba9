#!/usr/bin/env bash
# Installs what `make test` and `make run` need on a fresh Debian machine that has only Go:
#
# - Debian's `postgresql` package, when no PostgreSQL server binaries are found, unless
#   DATABASE_URL (or PGTEST_DATABASE_URL) points at an existing server. The search follows
#   internal/pgcluster.BinDir: $PG_BINDIR, `pg_config --bindir`, /usr/lib/postgresql/<version>/bin,
#   then initdb on $PATH.
# - For the dashboard's browser test (internal/e2e TestDashboardInABrowser): Node.js and npm
#   (Debian's nodejs and npm) when missing, Debian's chromium when /usr/bin/chromium is missing,
#   and web/test's npm packages (`npm ci`: playwright-core only, which downloads no browser) when
#   web/test/node_modules is missing or older than the lockfile. DSHD_SKIP_BROWSER=1 skips this.
#
# - Debian's `bubblewrap` package, when `bwrap` is not on PATH: the default shell sandbox of the
#   bash tool (pkg/sandbox), whose tests run it; `passt` (pasta) and `nftables` (nft), the
#   sandbox's egress-only network; `inotify-tools`, which the sandbox escape suite's attacker
#   commands use (inotifywait, run inside the sandbox from the host's read-only /usr).
#
# Idempotent: it installs nothing that is already there.
set -euo pipefail

cd "$(dirname "$0")/.."

log() { printf 'ensure-deps: %s\n' "$*" >&2; }

# apt_install installs Debian packages, with sudo when not root.
apt_installed_update=""
apt_install() {
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

ensure_bwrap() {
  local pkgs=()
  command -v bwrap >/dev/null 2>&1 || pkgs+=(bubblewrap)
  command -v pasta >/dev/null 2>&1 || pkgs+=(passt)
  [ -x /usr/sbin/nft ] || command -v nft >/dev/null 2>&1 || pkgs+=(nftables)
  command -v inotifywait >/dev/null 2>&1 || pkgs+=(inotify-tools)
  [ ${#pkgs[@]} -eq 0 ] && return 0
  log "installing Debian's ${pkgs[*]} (the bash tool's sandbox, its network and its escape suite)"
  apt_install "${pkgs[@]}" || return 1
  command -v bwrap >/dev/null 2>&1 || { log "bubblewrap installed but bwrap is not on PATH"; return 1; }
  log "${pkgs[*]} installed"
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
  has_server || { log "postgresql installed but its server binaries were not found"; return 1; }
  log "PostgreSQL installed"
}

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
    log "npm ci in $dir (playwright-core)"
    (cd "$dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  fi
}

ensure_bwrap
ensure_postgres
ensure_browser
