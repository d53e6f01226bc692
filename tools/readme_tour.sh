#!/usr/bin/env bash
# README.md's five-minute tour in a fresh virtualenv: pgbaton installed from this checkout
# as a user installs it (not editable), then tests/cli/test_readme_tour.py runs the tour's
# files and shell lines with that virtualenv's `pgbaton` and `python`.
# Usage: PGBATON_TEST_DSN=postgresql://... tools/readme_tour.sh   (else the embedded server)
set -euo pipefail
cd "$(dirname "$0")/.."

venv="$(mktemp -d)/venv"
trap 'rm -rf "$(dirname "$venv")"' EXIT
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet . pytest pytest-asyncio
# From an empty folder, so that `import pgbaton` finds the installed package, not src/.
cd "$(dirname "$venv")"
"$venv/bin/python" -m pytest -p no:cacheprovider --rootdir "$OLDPWD" -c "$OLDPWD/pyproject.toml" \
    "$OLDPWD/tests/cli/test_readme_tour.py"
