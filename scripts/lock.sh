#!/usr/bin/env bash
# Refreshes the lock files from pyproject.toml's ranges: the newest versions that satisfy them today, for every
# platform and Python omnid supports (macOS and Linux, 3.11+), each file with its hashes. `make setup` then installs
# exactly these versions. Run after changing a dependency, or to take newer releases; commit the result.
set -euo pipefail
cd "$(dirname "$0")/.."
uv=.venv/bin/uv
[ -x "$uv" ] || uv=$(command -v uv) || { echo "lock: uv not found (make setup installs it into .venv)"; exit 1; }
common=(--universal --generate-hashes --python-version 3.11 --upgrade --quiet)
"$uv" pip compile "${common[@]}" pyproject.toml lock/tools.in --extra test -o lock/requirements.txt
"$uv" pip compile "${common[@]}" --no-deps lock/no-deps.in -o lock/no-deps.txt
echo "lock: lock/requirements.txt and lock/no-deps.txt refreshed; review the diff, run make test, commit"
