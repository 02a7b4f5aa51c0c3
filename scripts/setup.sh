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
if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
  echo "setup: installing omnid and its dependencies into .venv (log: $log)"
  .venv/bin/python -m pip install -q --upgrade pip >>"$log" 2>&1
  .venv/bin/python -m pip install -q -e '.[test]' >>"$log" 2>&1 || { tail -30 "$log"; exit 1; }
  # The Sortformer feed-mode reference for the tests: mlx-audio's module alone, without its dependencies (they
  # would pull in transformers and torch audio stacks it does not need for this).
  .venv/bin/python -m pip install -q --no-deps 'mlx-audio==0.6.2' >>"$log" 2>&1 || { tail -30 "$log"; exit 1; }
  touch .venv/.installed
fi
