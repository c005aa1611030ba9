#!/usr/bin/env bash
# Lints openapi.yaml with the Redocly CLI pinned in this directory's package-lock.json, under
# redocly.yaml (recommended-strict: any warning fails). `make lint-contract` runs it, and so
# does `make test`; `make run` never does. Test-only installs, each only when missing:
#
# - Node.js and npm, Debian's nodejs and npm packages (as scripts/ensure-deps.sh installs them
#   for the browser test), with sudo when not root;
# - this directory's npm packages, with `npm ci` from the lockfile, when node_modules is
#   missing or older than the lockfile.
#
# The Redocly CLI needs Node.js 20.19 or later (or 22.12 or later).
set -euo pipefail

cd "$(dirname "$0")"

log() { printf 'lint-contract: %s\n' "$*" >&2; }

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { log "Node.js and npm are missing and this user cannot install them (no sudo)"; exit 1; }
    sudo="sudo"
  fi
  command -v apt-get >/dev/null 2>&1 || { log "Node.js and npm are missing and apt-get is not available; install them by hand"; exit 1; }
  log "installing Debian's nodejs and npm (the Redocly CLI's runtime)"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi

if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit((a === 20 && b >= 19) || (a === 22 && b >= 12) || a > 22 ? 0 : 1)'; then
  log "the Redocly CLI needs Node.js 20.19+ or 22.12+; this is $(node --version)"
  exit 1
fi

if [ ! -x node_modules/.bin/redocly ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  log "npm ci in tools/redocly (@redocly/cli)"
  npm ci --no-audit --no-fund --loglevel=error >/dev/null
fi

# No usage reports or update checks: the lint talks to nothing.
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
exec npx --no-install redocly lint --config redocly.yaml --format stylish ../../openapi.yaml
