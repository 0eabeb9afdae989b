#!/usr/bin/env bash
# Set up (venv, package, test dependencies, and as root the services the tests need), then
# run the whole test suite. Extra arguments are passed on to pytest (after ours: `-n 0` runs
# every test in this one process).
#
# The venv and the services are set up at once (neither needs the other). Independent tests
# run at once, in SANDBATCH_TEST_WORKERS pytest-xdist workers [4]: most of the suite waits on
# containers, servers and Snakemake rather than computing, so a 2-core machine runs 4 well.
# Tests that must not overlap, or that share a module's fixture, keep to one worker, and the
# slow ones start first (tests/conftest.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test &
setup=$!
[ "${SANDBATCH_NO_SERVICES:-0}" = 1 ] || bash scripts/services.sh || { wait "$setup" || true; exit 1; }
wait "$setup" || { echo "test.sh: scripts/setup.sh test failed (see above)" >&2; exit 1; }
exec .venv/bin/python -m pytest -n "${SANDBATCH_TEST_WORKERS:-4}" --dist loadgroup --no-loadscope-reorder "$@"
