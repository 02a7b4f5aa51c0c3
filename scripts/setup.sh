#!/usr/bin/env bash
# Sets up a fresh clone: OpenBLAS for MLX's CPU backend (Linux, best effort), a virtualenv in .venv, and omnid
# installed editable with its test extras. Safe to run again; it only redoes what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
log=${TMPDIR:-/tmp}/omnid-setup.log

if [ "$(uname -s)" = Linux ] && ! ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so\.0'; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing libopenblas0-pthread (log: $log)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenblas0-pthread; } >>"$log" 2>&1 \
      || echo "setup: could not install OpenBLAS; MLX will use its slow reference BLAS (see $log)"
  else
    echo "setup: OpenBLAS not found; install libopenblas0-pthread for ~50x faster matmuls on the CPU"
  fi
fi

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# Exactly the locked versions (lock/, refreshed by `make lock`), each checked against its hash, installed without
# resolving anything: the set CI tested, whatever the registry holds today. omnid itself is built by the locked
# hatchling, without build isolation, so that no build tool is resolved either.
if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ] || [ lock/requirements.txt -nt .venv/.installed ] \
   || [ lock/no-deps.txt -nt .venv/.installed ]; then
  echo "setup: installing omnid and its locked dependencies into .venv (log: $log)"
  for lockfile in lock/requirements.txt lock/no-deps.txt; do
    .venv/bin/python -m pip install -q --require-hashes --no-deps -r "$lockfile" >>"$log" 2>&1 || { tail -30 "$log"; exit 1; }
  done
  .venv/bin/python -m pip install -q --no-deps --no-build-isolation -e . >>"$log" 2>&1 || { tail -30 "$log"; exit 1; }
  touch .venv/.installed
fi
