#!/usr/bin/env bash
# Headless Chromium and its driver for the page's browser test (tests/test_page.py): Debian's chromium and
# chromium-driver, installed when missing and possible (root with apt-get). Best effort: without them the browser
# tests fail, saying what to install.
set -euo pipefail
log=${TMPDIR:-/tmp}/omnid-setup.log
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
if [ "$(uname -s)" = Linux ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "setup: installing chromium and chromium-driver for the browser test (log: $log)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; } >>"$log" 2>&1 \
    || echo "setup: could not install chromium; the browser tests cannot run (see $log)"
else
  echo "setup: chromium and chromedriver not found; install them (Debian: chromium chromium-driver) for the browser tests"
fi
