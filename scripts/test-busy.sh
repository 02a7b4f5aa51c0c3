#!/usr/bin/env bash
# The suite on a busy machine: `make test` with one CPU-bound process per core running beside it at normal
# priority, as a laptop doing other work would be. A test that passes alone but fails here depends on the machine's
# speed, which no test may. Prints the suite's wall time; exits with make test's status.
set -uo pipefail
cd "$(dirname "$0")/.."
busy=()
for _ in $(seq "$(nproc)"); do
  python3 -c 'while True: pass' &
  busy+=($!)
done
trap 'kill "${busy[@]}" 2>/dev/null' EXIT
started=$(date +%s)
make test
status=$?
echo "test-busy: make test exited $status after $(( $(date +%s) - started )) s beside ${#busy[@]} busy processes"
exit $status
