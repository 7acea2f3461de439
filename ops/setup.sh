#!/usr/bin/env bash
# Installs everything AgentRM needs; idempotent and quick when nothing is missing.
# - a virtualenv in .venv with the agent-side client (clients/python), then the project
#   and its test extras: the server depends on agentrm-client, which no index serves
# - torch pinned to the CPU build BEFORE sentence-transformers (an unpinned torch
#   would pull a multi-GB CUDA build)
# - PostgreSQL server binaries (Debian's package) when none are installed
# - the operator console built into frontend/dist (npm ci, npm run build), and Debian's
#   chromium for its browser tests (Playwright drives it; it never downloads a browser)
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
STAMP=.venv/.agentrm-setup
WANT="$(cat pyproject.toml clients/python/pyproject.toml | sha256sum | cut -c1-16)"

have_pg() {
  command -v initdb >/dev/null 2>&1 && return 0
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}

if ! have_pg; then
  echo "setup: PostgreSQL server binaries missing; installing Debian's postgresql"
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q postgresql
fi

apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  local SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q "$@"
}

command -v npm >/dev/null 2>&1 || { echo "setup: npm missing; installing Debian's nodejs and npm"; apt_install nodejs npm; }
[ -x /usr/bin/chromium ] || { echo "setup: chromium missing; installing Debian's chromium"; apt_install chromium; }

# The console: rebuilt when its sources or locked dependencies changed.
CONSOLE_WANT="$(cat frontend/package-lock.json frontend/package.json frontend/index.html frontend/*.ts frontend/tsconfig.json \
  $(find frontend/src -type f | sort) | sha256sum | cut -c1-16)"
CONSOLE_STAMP=frontend/dist/.agentrm-build
if [ ! -f "$CONSOLE_STAMP" ] || [ "$(cat "$CONSOLE_STAMP")" != "$CONSOLE_WANT" ]; then
  echo "setup: building the console (frontend/)"
  (cd frontend && npm ci --no-audit --no-fund --loglevel=error && npm run build --silent)
  echo "$CONSOLE_WANT" > "$CONSOLE_STAMP"
fi

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x .venv/bin/agentrm ]; then
  exit 0
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ./clients/python
.venv/bin/python -m pip install -q -e ".[test,bench]"
echo "$WANT" > "$STAMP"
echo "setup: done"
